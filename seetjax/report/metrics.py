"""Per-step scalars to `metrics.jsonl` (one JSON object per line) and TensorBoard event files.

Only process 0 writes; the others get a writer that does nothing, so callers need no checks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import jax


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
