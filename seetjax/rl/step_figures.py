"""Figures of an RL step beyond its rollouts and its update: the device memory's peak and the
programs compiled so far (a count that grows step after step means a shape that varies: at
Qwen2.5-1.5B each new program costs tens of seconds)."""

from __future__ import annotations

import jax

from seetjax.learner import Learner
from seetjax.sampling import Sampler


def peak_memory_gib(devices: list[jax.Device] | None = None) -> float | None:
    """The largest `peak_bytes_in_use` of `devices` (default: this process's) in GiB, since the
    process started; None where the backend keeps no such figure (the CPU: `memory_stats()` is
    None there)."""
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use")
             for d in devices or jax.local_devices()]
    peaks = [p for p in peaks if p is not None]
    return max(peaks) / 2**30 if peaks else None


def step_figures(learner: Learner, sampler: Sampler) -> dict[str, float]:
    """device/peak_memory_gib (left out where unknown), compile/learner and compile/sampler
    (programs compiled so far: the update; the sampler's prefill and decode)."""
    figures = {"compile/learner": float(learner.compile_count()),
               "compile/sampler": float(sampler.compile_count())}
    peak = peak_memory_gib()
    if peak is not None:
        figures["device/peak_memory_gib"] = peak
    return figures
