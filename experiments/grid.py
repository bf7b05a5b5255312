"""What the ablation scripts share: config overrides by dotted name, the SFT warm-up every run of a
grid starts from (built once, safe when grid cells run in parallel processes), finished runs kept
as JSON so a restarted grid skips them, grid cells run several at once (one run per process) or a
shard of them per host, expanded percentile-bootstrap confidence intervals (over seeds, and
paired by seed; `seetjax.report.bootstrap`), mean +- std cells and the CSV."""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import fcntl
import json
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import ml_collections
import numpy as np

from seetjax.defaults.base_model import resolve_model_path
from seetjax.report.bootstrap import bootstrap_interval
from seetjax.sft.run import SFTRun

RESULT = "ablation_result.json"
T = TypeVar("T")


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
            sft = sft.copy_and_resolve_references()
            sft.model.path = str(resolve_model_path(sft.model.path))
            SFTRun(sft, workdir).run()
    return workdir / "model"


def finished(workdir: Path) -> dict | None:
    """The result `cached_run` kept in `workdir`, or None when the run has not finished."""
    done = workdir / RESULT
    return json.loads(done.read_text()) if done.exists() else None


def cached_run(workdir: Path, run: Callable[[], dict]) -> dict:
    """`run()`'s result, kept in `workdir`: a finished run is not run again (an unfinished
    TrainRun resumes from its checkpoint)."""
    result = finished(workdir)
    if result is None:
        result = run()
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / RESULT).write_text(json.dumps(result))
    return result


def parse_shard(text: str) -> tuple[int, int]:
    """"i/n" -> (i, n): this host runs the cells whose index mod n is i."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"shard {text!r}: expected i/n, e.g. 0/4") from None
    if not 0 <= index < count:
        raise ValueError(f"shard {text!r}: needs 0 <= i < n")
    return index, count


def shard(cells: Sequence[T], index: int, count: int) -> list[T]:
    """The cells of shard `index` of `count` (hosts sharing the grid's directory split it so)."""
    return [c for i, c in enumerate(cells) if i % count == index]


def run_cells(run: Callable[[T], dict], cells: Sequence[T], workers: int
              ) -> tuple[list[dict], list[tuple[T, str]]]:
    """`run(cell)` for every cell: in this process one after another (workers <= 1), or
    `workers` at once, each in a fresh process of its own ('spawn', one run per process: no JAX
    runtime or device memory is shared, and a crash ends one cell only). `run` must be picklable
    (a module-level function, or a partial of one). Returns the results in cell order and the
    (cell, error) of the cells that failed; the others go on."""
    if workers <= 1:
        results, failed = [], []
        for cell in cells:
            try:
                results.append(run(cell))
            except Exception as e:  # noqa: BLE001 - one failed cell must not end the grid
                failed.append((cell, f"{type(e).__name__}: {e}"))
        return results, failed
    # Processes sharing a GPU take memory as they need it, not each 75% of it up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    done: dict[int, dict] = {}
    failed = []
    with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"),
            max_tasks_per_child=1) as pool:
        futures = {pool.submit(run, cell): i for i, cell in enumerate(cells)}
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            try:
                done[i] = future.result()
            except Exception as e:  # noqa: BLE001 - reported with its cell
                failed.append((cells[i], f"{type(e).__name__}: {e}"))
    return [done[i] for i in sorted(done)], failed


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A mean over runs and its confidence interval [low, high], from `n` finite values."""

    mean: float
    low: float
    high: float
    n: int

    def cell(self, fmt: str = ".3f") -> str:
        """`mean [low, high]` (`-` without values)."""
        if not self.n:
            return "-"
        return f"{self.mean:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def bootstrap_mean(values: Sequence[float], resamples: int = 10_000, level: float = 0.95,
                   seed: int = 0) -> Estimate:
    """The mean of the finite `values` (a run that never reached a threshold is nan) with its
    expanded percentile-bootstrap interval (`seetjax.report.bootstrap.bootstrap_interval` with
    `expanded=True`: a plain one covers about 84% at 5 seeds); seeded, so a summary is
    reproducible. One value gives a zero-width interval, none all-nan."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if not v.size:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    low, high = bootstrap_interval(v, level, resamples, seed, expanded=True)
    return Estimate(float(v.mean()), low, high, int(v.size))


def paired_difference(values: Mapping[Any, float], reference: Mapping[Any, float],
                      **bootstrap: Any) -> Estimate:
    """The mean of `values[k] - reference[k]` over the keys (seeds) both have a finite value for,
    with its bootstrap interval (`bootstrap_mean`): pairing by seed removes what the runs of a
    seed share (their warm-up, their task order) from the comparison."""
    keys = [k for k in values if k in reference
            and np.isfinite(values[k]) and np.isfinite(reference[k])]
    return bootstrap_mean([values[k] - reference[k] for k in keys], **bootstrap)


def mean_std(values: Sequence[float], fmt: str = ".3f") -> str:
    """`mean +- std` of the finite values (`-` when none)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    return f"{v.mean():{fmt}} +- {v.std():{fmt}}" if v.size else "-"


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Element i: the mean of the finite values among values[i - window + 1 : i + 1] (fewer at
    the start; nan where there are none). Curves are smoothed with it, as one RL step's batch is
    a few questions."""
    finite = np.isfinite(values)
    sums = np.cumsum(np.where(finite, values, 0.0))
    counts = np.cumsum(finite)
    sums[window:] = sums[window:] - sums[:-window]
    counts[window:] = counts[window:] - counts[:-window]
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def write_csv(rows: Sequence[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
