"""What the processes of a multi-host run must agree on, and each one's share of the tasks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils

T = TypeVar("T")


def local_shard(items: Sequence[T]) -> list[T]:
    """This process's items: item i belongs to process i mod P (always the same ones)."""
    return list(items[jax.process_index()::jax.process_count()])


def mean_over_processes(values: Mapping[str, float]) -> dict[str, float]:
    """Each scalar averaged over processes (the same keys on every process)."""
    if jax.process_count() == 1:
        return {k: float(v) for k, v in values.items()}
    keys = sorted(values)
    gathered = multihost_utils.process_allgather(np.asarray([values[k] for k in keys], np.float64))
    return dict(zip(keys, np.asarray(gathered).reshape(-1, len(keys)).mean(axis=0).tolist()))
