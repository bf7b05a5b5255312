"""Where each RL step's rollouts come from (`StepRollouts`): the lock-step sampler with the
learner's current weights; the run's serving engine (`rollout.mode="engine"`: one for the run,
its compiled programs and prefix cache kept across steps, given the learner's weights whenever
their version moves on); or an asynchronous run's producer thread (`rollout.schedule="async"`,
`seetjax.rl.async_rollouts`). A step's tasks, seeds and random key are functions of the step
alone, so every source plays a step alike."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from seetjax.errors import invalid
from seetjax.models.tokenizer import Tokenizer
from seetjax.rl.alarms import weight_sync
from seetjax.rl.async_rollouts import (
    RolloutPipeline,
    Snapshot,
    checked,
    take_snapshot,
    trained_result,
)
from seetjax.rl.config import Plan
from seetjax.rl.policy_states import SHARED, PolicyStates
from seetjax.rollout.loop import Played, Rollout
from seetjax.rollout.multi_agent import MultiAgentRollout
from seetjax.rollout.policy import SamplerPolicy
from seetjax.rollout.result import RolloutResult
from seetjax.runtime import sharding
from seetjax.sampling import Sampler
from seetjax.seet.config import StageConfig
from seetjax.seet.curriculum import Curriculum
from seetjax.serving.engine import Engine
from seetjax.serving.rollout_policy import EnginePolicy


class StepRollouts:
    """A run's rollouts, step by step (see the module docstring): `self(step, curriculum)` is
    step `step`'s result; `stop()` ends the engine's and the producer's threads."""

    def __init__(self, config: ml_collections.ConfigDict, plan: Plan, policies: PolicyStates,
                 sampler: Sampler, tokenizer: Tokenizer, rollout: Rollout | MultiAgentRollout,
                 tasks: Sequence[Any]):
        self.config, self.plan, self.policies = config, plan, policies
        self.sampler, self.tokenizer, self.rollout, self.tasks = sampler, tokenizer, rollout, tasks
        self.engine: Engine | None = None  # mode "engine": made at its first use (`_serving`)
        self.pipeline: RolloutPipeline | None = None

    def __call__(self, step: int, curriculum: Curriculum
                 ) -> tuple[RolloutResult, StageConfig, dict[str, float]]:
        """Step `step`'s rollout result, the SEET stage it played in, and the weight check's
        metrics (the sampler's copy against the learner's)."""
        if self.pipeline is not None:  # played ahead; the slow loop here, in step order
            return trained_result(self.pipeline, self.rollout, step,
                                  self.policies.version(SHARED), self.plan.schedule.max_staleness)
        stage, seed = curriculum.stage, self.seed(step)
        policy = self._policy(step, seed)
        synced = weight_sync(self.policies, policy)
        # the policy's weights and its last KV cache go with it, before the update
        # (seetjax.rl.memory_plan; `device/live_gib_at_update`, tests/rl/test_live_memory.py)
        return (self.rollout(self.tasks_for(step), policy, stage, curriculum.progress, step,
                             seed=seed), stage, synced)

    # ---------------------------------------------------------------- asynchronous runs

    def start_ahead(self, first: int, last: int, curriculum: Curriculum) -> None:
        """With `rollout.schedule="async"`, starts playing steps `first` to `last - 1` ahead,
        from the weights as they are now."""
        schedule = self.plan.schedule
        if schedule.schedule != "async":
            return
        self.pipeline = RolloutPipeline(self._play_ahead, first, last,
                                        schedule.lag(self.plan.learner.mini_batches),
                                        self.config.train.checkpoint_every, check=checked)
        self.published(first, curriculum)

    def published(self, done: int, curriculum: Curriculum) -> None:
        """What later steps' rollouts may start from, once `done` steps are done (async)."""
        if self.pipeline is not None:
            self.pipeline.publish(take_snapshot(self.policies, done, curriculum.stage,
                                                curriculum.progress))

    def paused(self) -> contextlib.AbstractContextManager:
        """No rollout plays ahead inside (an evaluation's sampler has the devices)."""
        return self.pipeline.paused() if self.pipeline else contextlib.nullcontext()

    def close_ahead(self) -> None:
        """Stops playing ahead (a rollout of a step past the run's end is let finish)."""
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None

    def stop(self) -> None:
        """No engine or producer thread outlives the run, error or not."""
        self.close_ahead()
        if self.engine is not None:
            self.engine.stop()

    def _play_ahead(self, step: int, snapshot: Snapshot) -> Played:
        """Step `step`'s episodes played with `snapshot` (the producer thread): the policy and
        seeds a synchronous step would use; through the run's engine, given the snapshot's
        weights where it serves another version (snapshots come in step order, so versions
        never go back), its own copy none: it serves the snapshot's arrays."""
        seed = self.seed(step)
        if self.plan.rollout.mode == "engine":
            policy = EnginePolicy(self._serving(lambda: snapshot.params, snapshot.version),
                                  self.plan.sampling, seed)
        else:
            policy = SamplerPolicy(self.sampler, snapshot.params, self.plan.sampling,
                                   self.tokenizer.stop_ids, self._key(step), snapshot.version)
        return self.rollout.play_tasks(self.tasks_for(step), policy, snapshot.stage,
                                       snapshot.progress, seed)

    # ---------------------------------------------------------------- a step's draw

    def tasks_for(self, step: int) -> list[Any]:
        """This process's tasks of `step`: epochs over a seeded permutation, a pure function of
        the step (nothing to checkpoint)."""
        n, k = len(self.tasks), self.config.data.tasks_per_step // jax.process_count()
        picked = []
        for j in range(step * k, step * k + k):
            epoch, position = divmod(j, n)
            order = np.random.default_rng([self.config.seed, epoch]).permutation(n)
            picked.append(self.tasks[order[position]])
        return picked

    def seed(self, step: int) -> int:
        """Step `step`'s rollout seed on this process."""
        return self.config.seed * 7919 + step * 131 + jax.process_index()

    def _key(self, step: int) -> jax.Array:
        return jax.random.fold_in(jax.random.key(self.config.seed), step)

    def _policy(self, step: int, seed: int) -> SamplerPolicy | EnginePolicy:
        """Step `step`'s rollout policy: a `SamplerPolicy` on the learner's current parameters,
        or (mode "engine") the run's engine, given them once the learner's version moved on."""
        if self.plan.rollout.mode != "engine":
            return self.policies.rollout_policy(
                lambda params, key, version: SamplerPolicy(
                    self.sampler, params, self.plan.sampling, self.tokenizer.stop_ids, key,
                    version),
                self._key(step))
        # a copy the engine owns: the learner's f32 arrays are donated to each update
        return EnginePolicy(self._serving(self.policies.sampling_copy,
                                          self.policies.version(SHARED)),
                            self.plan.sampling, seed)

    # ---------------------------------------------------------------- the engine

    def _serving(self, params: Callable[[], nnx.State], version: int) -> Engine:
        """The run's engine (`rollout.mode="engine"`), made at its first use and kept: its
        compiled programs and prefix cache serve every step; a row for each of the step's
        episodes on this process. It serves `params()` of `version`, given them where it
        serves another version (older prefix-cache entries dropped)."""
        if self.engine is not None and version == self.engine.weight_version:
            return self.engine
        weights = params()
        if self.engine is None:  # at version 0
            rows = (self.config.data.tasks_per_step // jax.process_count()
                    * self.plan.rollout.group_size)
            self.engine = Engine(self.policies.model(), self.tokenizer, params=weights,
                                 sampler=self.sampler, max_batch=rows, max_queue=rows,
                                 chunk_steps=self.plan.rollout.decode_chunk or 16)
        if version != self.engine.weight_version:
            self.engine.update_weights(weights, version)
        return self.engine


def sample_mesh(devices: Sequence[jax.Device], mode: str) -> Mesh:
    """The mesh of a sampler on devices of its own (`rollout.sampler_devices`): the batch split
    over them in lock step, the model (tensor parallel) for the engine, whose rows are whole on
    every device (`check_engine_mesh`)."""
    return sharding.make_mesh(*((1, 1, -1) if mode == "engine" else (-1, 1, 1)), devices=devices)


def check_engine_mesh(mesh: tuple[int, int, int]) -> None:
    """Refuses rollout.mode "engine" where the sampling mesh splits the batch: the engine keeps
    one cache row per sequence, unsplit (serving/rows.py)."""
    if jax.process_count() > 1:  # each process samples on a data mesh of its local devices
        split = jax.local_device_count()
    else:
        data, fsdp, _ = sharding.mesh_sizes(mesh, jax.device_count())
        split = data * fsdp
    if split > 1:
        raise invalid("config.rollout", "mode", "engine", f"the engine's rows are not split over "
                      f"devices, and config.learner.mesh={tuple(mesh)} splits the sampling batch "
                      f"{split} ways on {jax.device_count()} devices: use a mesh of data=fsdp=1 "
                      "(tensor parallel) or rollout.mode='lockstep'")
