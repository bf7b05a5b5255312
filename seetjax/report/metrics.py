"""Per-step scalars to `metrics.jsonl` (one JSON object per line) and TensorBoard event files.

Only process 0 writes; the others get a writer that does nothing, so callers need no checks. A
resumed run first rewinds the file to its checkpoint (`rewind_metrics`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

import jax

log = logging.getLogger(__name__)


class MetricsWriter:
    """Appends `{"step": s, name: value, ...}` lines to `<workdir>/metrics.jsonl` and the same
    scalars to TensorBoard events under `<workdir>/tensorboard` (names keep their '/' groups)."""

    def __init__(self, workdir: str | os.PathLike, *, tensorboard: bool = True):
        self.enabled = jax.process_index() == 0
        self.path = Path(workdir) / "metrics.jsonl"
        self._jsonl = self._tb = None
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.path, "a", buffering=1)  # line-buffered: readable while running
        if tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(os.fspath(Path(workdir) / "tensorboard"))

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        values = {k: float(v) for k, v in scalars.items()}
        # JSON has no NaN/inf: a skipped non-finite step is written as null, not as invalid JSON.
        line = {k: (v if math.isfinite(v) else None) for k, v in values.items()}
        self._jsonl.write(json.dumps({"step": int(step), **line}) + "\n")
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, value, int(step))

    def flush(self) -> None:
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rewind_metrics(workdir: str | os.PathLike, step: int) -> None:
    """Keeps the rows of `<workdir>/metrics.jsonl` up to `step` (a run resumed there writes the
    later ones again), atomically; lines that do not read as a row (a write cut short by a
    crash or a full disk) are dropped with a warning. Process 0 only."""
    path = Path(workdir) / "metrics.jsonl"
    if jax.process_index() != 0 or not path.exists():
        return
    kept, dropped = [], 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            keep = row["step"] <= step
        except (ValueError, TypeError, KeyError):
            dropped += bool(line.strip())
            continue
        if keep:
            kept.append(line + "\n")
    if dropped:
        log.warning("%s: %d unreadable line%s dropped", path, dropped, "s" * (dropped > 1))
    partial = path.with_suffix(".jsonl.tmp")
    partial.write_text("".join(kept))
    partial.replace(path)
