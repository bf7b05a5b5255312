"""Figures of an RL step beyond its rollouts and its update: the device memory's peak, what is
alive on the devices when the update starts, and the programs compiled so far (a count that grows
step after step means a shape that varies: at Qwen2.5-1.5B each new program costs tens of
seconds)."""

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


def live_bytes(devices: list[jax.Device] | None = None) -> dict[jax.Device, int]:
    """Bytes of the distinct buffers of `jax.live_arrays()` on each of `devices` (default: this
    process's), on any backend. Distinct: several arrays may view one buffer (a sharded array's
    per-device shards, which a checkpoint save materializes; parameters the sampler shares with
    the learner), so each buffer counts once. An array deleted while it is read (donated by a
    rollout playing ahead in another thread) is not live and does not count."""
    devices = list(devices or jax.local_devices())
    buffers: dict[tuple[jax.Device, int], int] = {}
    for array in jax.live_arrays():
        try:
            for shard in array.addressable_shards:
                if shard.device in devices:
                    buffers[shard.device, shard.data.unsafe_buffer_pointer()] = shard.data.nbytes
        except RuntimeError:  # jax's "Array has been deleted" and JaxRuntimeError alike
            # deleted or donated after `live_arrays` listed it, before or while it was read: a
            # rollout that plays ahead (another thread) donates its cache at every decode step
            continue
    totals = dict.fromkeys(devices, 0)
    for (device, _), nbytes in buffers.items():
        totals[device] += nbytes
    return totals


def live_gib() -> float:
    """The largest of this process's devices' `live_bytes`, in GiB: comparable with the memory
    plan's figures, which are per device (`seetjax.rl.memory_plan`)."""
    return max(live_bytes().values()) / 2**30


def step_figures(learner: Learner, sampler: Sampler, live_at_update: float | None = None
                 ) -> dict[str, float]:
    """device/peak_memory_gib (left out where unknown), device/live_gib_at_update (`live_gib`
    when the update started, where given), compile/learner and compile/sampler (programs
    compiled so far: the update; the sampler's prefill and decode)."""
    figures = {"compile/learner": float(learner.compile_count()),
               "compile/sampler": float(sampler.compile_count())}
    peak = peak_memory_gib()
    if peak is not None:
        figures["device/peak_memory_gib"] = peak
    if live_at_update is not None:
        figures["device/live_gib_at_update"] = live_at_update
    return figures
