"""Asynchronous RL (`rollout.schedule="async"`): the next steps' episodes play while the learner
trains on the current step's.

A producer thread plays RL step s's tasks (`Rollout.play_tasks`) with a `Snapshot`: the sampling
weights, their version and the SEET stage the trainer published once `source(s)` steps were done,

    source(s) = max(s - lag, the last checkpointed step count at or before s),
    lag = max_staleness // mini_batches,

while the learner trains step s - 1 on the devices of its own mesh. A step's update moves the
weight version by at most `mini_batches` (its optimizer updates), so no token trained at step s
was sampled more than `max_staleness` versions behind the learner training it: staleness is
bounded at the source, by what a rollout may start with, as AReaL bounds it
(arXiv:2505.24298, section 5.1), and no rollout is thrown away. The learner still checks every
group (`seetjax.rollout.versions.fresh_episodes`) and drops one that breaks the bound, counted
in `rollout/stale_dropped`.

Determinism: which snapshot a step plays with is a function of the step, never of timing, so an
asynchronous run is reproducible; at each checkpoint the pipeline starts over from the
checkpointed weights (source(s) = s there), so a run resumed from that checkpoint continues
exactly. The slow loop (anchors, records) runs in the trainer's thread, in step order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax

from seetjax.errors import invalid
from seetjax.rl.alarms import learner_checksum, params_checksum
from seetjax.rl.policy_states import SHARED, PolicyStates
from seetjax.rl.schedule import ScheduleConfig
from seetjax.rollout.loop import Played, Rollout
from seetjax.rollout.result import RolloutResult
from seetjax.rollout.versions import fresh_episodes
from seetjax.seet.config import StageConfig


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the trainer publishes after `done` RL steps: the sampling weights (a copy of the
    learner's, on the sampler's devices), their `version`, the learner's checksum of them, the
    curriculum's stage and progress for the rollouts that start from it, and whether the copy's
    checksum differs from the learner's (`sync/weight_mismatch`: `checked` computes it, nan
    until then)."""

    done: int
    params: Any
    version: int
    learner_checksum: int
    stage: StageConfig
    progress: float
    weight_mismatch: float = math.nan


def checked(snapshot: Snapshot) -> Snapshot:
    """`snapshot` with its `weight_mismatch`. The producer computes it before it plays, while
    nothing else runs on the sampler's devices: on a tensor-parallel sampler mesh (the engine's)
    the checksum's reduction is a collective program, which the trainer's thread must not
    enqueue while the engine's decode thread enqueues its own (per device in different orders,
    they could wait on each other)."""
    mismatch = float(params_checksum(snapshot.params) != snapshot.learner_checksum)
    return dataclasses.replace(snapshot, weight_mismatch=mismatch)


class RolloutPipeline:
    """The producer thread (see the module docstring). `play(step, snapshot)` plays a step's
    tasks, after `check(snapshot)` (`checked`; none: as published); steps `first` to `last - 1`
    are played in order; `checkpoint_every` steps start over from a published snapshot of
    their own."""

    def __init__(self, play: Callable[[int, Snapshot], Played], first: int, last: int,
                 lag: int, checkpoint_every: int,
                 check: Callable[[Snapshot], Snapshot] | None = None):
        self._play, self.lag, self._every = play, lag, checkpoint_every
        self._check = check or (lambda snapshot: snapshot)
        self._cond = threading.Condition()
        self._snapshots: dict[int, Snapshot] = {}
        self._played: dict[int, tuple[Played, Snapshot]] = {}
        self._paused = self._busy = 0
        self._closed, self._error = False, None
        self._thread = threading.Thread(target=self._produce, args=(first, last), daemon=True,
                                        name="rollout-producer")
        self._thread.start()

    def source(self, step: int) -> int:
        """The steps done when the snapshot step `step` plays with was published."""
        return max(step - self.lag, step // self._every * self._every)

    def publish(self, snapshot: Snapshot) -> None:
        with self._cond:
            self._snapshots[snapshot.done] = snapshot
            self._cond.notify_all()

    def take(self, step: int) -> tuple[Played, Snapshot]:
        """Step `step`'s played episodes and the snapshot they played with (waits for them);
        an error of the producer is raised here."""
        with self._cond:
            self._cond.wait_for(lambda: step in self._played or self._error is not None)
            if self._error is not None:
                raise RuntimeError(f"the rollout of RL step {step + 1} failed") from self._error
            return self._played.pop(step)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No rollout plays inside (one playing is waited for): an evaluation's sampler and
        cache do not share the devices with a rollout's."""
        with self._cond:
            self._paused += 1
            self._cond.wait_for(lambda: not self._busy)
        try:
            yield
        finally:
            with self._cond:
                self._paused -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """Stops producing (a rollout playing is let finish) and joins the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _produce(self, first: int, last: int) -> None:
        for step in range(first, last):
            source = self.source(step)
            with self._cond:
                self._cond.wait_for(lambda source=source: self._closed or (
                    source in self._snapshots and not self._paused))
                if self._closed:
                    return
                snapshot = self._snapshots[source]
                # snapshots no later step plays with: each costs a copy of the weights
                later = self.source(step + 1)
                for done in [d for d in self._snapshots if d < later]:
                    del self._snapshots[done]
                self._busy = 1
            try:
                snapshot = self._check(snapshot)
                played = self._play(step, snapshot)
            except BaseException as error:  # noqa: BLE001 - raised in the trainer by `take`
                with self._cond:
                    self._error, self._busy = error, 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._played[step] = (played, snapshot)
                self._busy = 0
                self._cond.notify_all()


def check_devices(schedule: ScheduleConfig) -> None:
    """Refuses a schedule this machine cannot run: "async" or a sampler mesh of its own in one
    process only (each would need its own producer and weight sync), devices left to learn on,
    and "async" on several devices with a sampler mesh of its own only."""
    if jax.process_count() > 1:
        field, value = (("schedule", "async") if schedule.schedule == "async"
                        else ("sampler_devices", schedule.sampler_devices))
        raise invalid("config.rollout", field, value, f"runs in one process; this run has "
                      f"{jax.process_count()}")
    if schedule.sampler_devices >= jax.device_count():
        raise invalid("config.rollout", "sampler_devices", schedule.sampler_devices,
                      f"leaves none of the {jax.device_count()} devices to learn on")
    if schedule.schedule == "async" and not schedule.sampler_devices and jax.device_count() > 1:
        # two threads enqueueing multi-device programs on the same devices may enqueue them in
        # different orders on different devices: collectives then wait on each other (seen on 8
        # CPU devices: an abort inside the update's all-reduce)
        raise invalid("config.rollout", "sampler_devices", 0, f"with schedule='async' on "
                      f"{jax.device_count()} devices, the sampler needs devices of its own "
                      "(e.g. half of them), or the rollout's and the update's programs could "
                      "deadlock on the devices they share")


def split_devices(sampler_devices: int) -> tuple[list[jax.Device] | None, list[jax.Device] | None]:
    """The sampler's devices and the learner's (the first `sampler_devices` and the rest), or
    (None, None) to share them all."""
    if not sampler_devices:
        return None, None
    devices = jax.devices()
    return devices[:sampler_devices], devices[sampler_devices:]


def take_snapshot(policies: PolicyStates, done: int, stage: StageConfig,
                  progress: float) -> Snapshot:
    """The shared set's weights after `done` steps, copied where the sampler runs (the
    learner's own arrays are donated to its next update), with the learner's checksum of them
    (computed on the learner's devices; the copy's is the producer's to compute: `checked`)."""
    state = policies.state(SHARED)
    return Snapshot(done, policies.sampling_copy(), int(state.step),
                    learner_checksum(policies.learner, state), stage, progress)


def trained_result(pipeline: RolloutPipeline, rollout: Rollout, step: int, learner_version: int,
                   max_staleness: int) -> tuple[RolloutResult, StageConfig, dict[str, float]]:
    """Step `step`'s rollout result from `pipeline`, its groups within the staleness bound,
    the slow loop run: the result, the stage it played in, and the weight sync's metrics
    (`sync/weight_mismatch` of its snapshot, `rollout/stale_dropped`)."""
    played, snapshot = pipeline.take(step)
    kept, dropped = fresh_episodes(played.episodes, learner_version, max_staleness)
    result = rollout.finish(dataclasses.replace(played, episodes=kept), step)
    return result, played.stage, {"sync/weight_mismatch": snapshot.weight_mismatch,
                                  "rollout/stale_dropped": float(dropped)}
