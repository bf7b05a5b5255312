"""What the ablation scripts share: config overrides by dotted name, the SFT warm-up every run of a
grid starts from (built once, safe when grid cells run in parallel processes), finished runs kept
as JSON so a restarted grid skips them, mean +- std cells and the CSV."""

from __future__ import annotations

import csv
import fcntl
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from seetjax.sft import SFTRun

RESULT = "ablation_result.json"


def set_field(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
    *path, key = dotted.split(".")
    for name in path:
        config = config[name]
    config[key] = value


def warm_up(sft: ml_collections.ConfigDict, workdir: Path) -> Path:
    """The SFT model of `sft` in `workdir` (trained unless there already), under a file lock so
    that grid cells started in parallel train it once; returns its model directory."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (workdir / "model" / "config.json").exists():
            SFTRun(sft.copy_and_resolve_references(), workdir).run()
    return workdir / "model"


def cached_run(workdir: Path, run: Callable[[], dict]) -> dict:
    """`run()`'s result, kept in `workdir`: a finished run is not run again (an unfinished
    TrainRun resumes from its checkpoint)."""
    done = workdir / RESULT
    if not done.exists():
        result = run()
        workdir.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps(result))
    return json.loads(done.read_text())


def mean_std(values: Sequence[float], fmt: str = ".3f") -> str:
    """`mean +- std` of the finite values (`-` when none)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    return f"{v.mean():{fmt}} +- {v.std():{fmt}}" if v.size else "-"


def write_csv(rows: Sequence[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
