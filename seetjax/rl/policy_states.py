"""The parameter sets a training run trains, by role: one policy shared by every role, or (with
`multi_agent.separate_params`) one per role of a multi-agent team, each with its own optimizer
state.

`PolicyStates` is all the trainer knows of them: a role's sampling parameters, the rollout policy
(one, or one per role), the rows each set trains on (`parts`), its update, what a checkpoint
holds, and the exported models. Every set has the model's structure, so one `Learner` (one
compiled step) updates them all. Separate sets start as copies of one state (the same base
checkpoint), each with buffers of its own, since an update donates its state's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from seetjax.batch import TrajectoryBatch
from seetjax.learner import Learner, TrainState
from seetjax.models.hf import save_hf_checkpoint, save_lora_adapter
from seetjax.models.lora import has_lora
from seetjax.models.tokenizer import Tokenizer
from seetjax.models.transformer import Transformer
from seetjax.rollout.policy import Policy
from seetjax.rollout.result import RolloutResult
from seetjax.runtime import sharding

SHARED = "shared"  # the one set's name when every role shares it
# Single-agent evaluation episodes play the QA environment itself, as the workers do (the
# coordinator never searches), so they are played with the worker's set.
EVAL_ROLE = "worker"


class PolicyStates:
    """The run's train states by role: `{SHARED: state}`, or one per role (see the module
    docstring)."""

    def __init__(self, learner: Learner, state: TrainState, roles: Sequence[str] = (), *,
                 sample_mesh: Mesh | None = None):
        self.learner = learner
        self.states = {SHARED: state} if not roles else {
            role: state if i == 0 else jax.tree.map(jnp.copy, state)
            for i, role in enumerate(roles)}
        # Each process samples its own episodes on its own devices (the learner's mesh when
        # there is one process: then sampler and learner share the parameter arrays), unless
        # given devices of their own (`rollout.sampler_devices`).
        self.sample_mesh = sample_mesh or (learner.mesh if jax.process_count() == 1 else
                                           sharding.make_mesh(devices=jax.local_devices()))

    @property
    def separate(self) -> bool:
        return SHARED not in self.states

    def state(self, role: str) -> TrainState:
        """`role`'s state (the shared one when every role shares it)."""
        return self.states[role if self.separate else SHARED]

    def model(self, role: str = EVAL_ROLE) -> Transformer:
        return self.learner.model(self.state(role))

    def sampling_params(self, role: str = EVAL_ROLE) -> nnx.State:
        """`role`'s current parameters where this process samples: the learner's own arrays on
        one process; on several, gathered and placed on the local devices (the weight sync of
        multi-host RL: its cost grows with the model, not with the batch); on a sampler mesh
        of its own, copied there."""
        params = self.learner.sampling_params(self.state(role))
        if jax.process_count() == 1:
            return (params if self.sample_mesh is self.learner.mesh
                    else sharding.shard_state(params, self.sample_mesh))
        host = multihost_utils.process_allgather(params, tiled=True)
        return sharding.shard_state(host, self.sample_mesh)

    def sampling_copy(self, role: str = EVAL_ROLE) -> nnx.State:
        """`sampling_params` as arrays of their own: the learner's are donated to each update
        (on a sampler mesh of its own they are copied there already, so not copied again)."""
        params = self.sampling_params(role)
        return jax.tree.map(jnp.copy, params) if self.sample_mesh is self.learner.mesh else params

    def version(self, role: str) -> int:
        """The weight version of `role`'s set: its updates applied (`TrainState.step`)."""
        return int(self.state(role).step)

    def rollout_policy(self, make: Callable[[nnx.State, jax.Array, int], Policy],
                       key: jax.Array) -> Policy | dict[str, Policy]:
        """The rollout's policy `make(params, key, version)` with the shared set, or one per
        role (its key folded with the role's index), as `MultiAgentRollout` takes them."""
        if not self.separate:
            return make(self.sampling_params(SHARED), key, self.version(SHARED))
        return {role: make(self.sampling_params(role), jax.random.fold_in(key, i),
                           self.version(role))
                for i, role in enumerate(self.states)}

    def parts(self, result: RolloutResult) -> dict[str, RolloutResult]:
        """The episodes each set trains on: all of `result` for the shared set, else each
        role's own (`TeamResult.by_role`)."""
        return result.by_role() if self.separate else {SHARED: result}

    def update(self, role: str, batch: TrajectoryBatch) -> dict[str, float]:
        """One learner update of `role`'s set on `batch`; the learner's metrics."""
        self.states[role], metrics = self.learner.update(self.states[role], batch)
        return metrics

    @staticmethod
    def named(role: str, metrics: Mapping[str, float]) -> dict[str, float]:
        """`metrics` of `role`'s set under their names in the run's metrics: as they are for
        the shared set, prefixed by role otherwise (`worker_loss`)."""
        return {k if role == SHARED else f"{role}_{k}": v for k, v in metrics.items()}

    @property
    def checkpointed(self) -> TrainState | dict[str, TrainState]:
        """What a checkpoint holds (`Checkpointer` takes either): the shared state, or the
        states by role."""
        return dict(self.states) if self.separate else self.states[SHARED]

    def restore(self, states: TrainState | Mapping[str, TrainState]) -> None:
        """Takes the states a checkpoint restored into `checkpointed`'s form."""
        self.states = dict(states) if self.separate else {SHARED: states}

    def export(self, workdir: Path, tokenizer: Tokenizer, base_name: str | None) -> None:
        """Each set's model as an HF directory, `model/` (shared) or `model_<role>/`; with LoRA
        also its adapters alone, for PEFT (`adapter/`, `adapter_<role>/`)."""
        for role, state in self.states.items():
            suffix = "" if role == SHARED else f"_{role}"
            model = self.learner.model(state)
            save_hf_checkpoint(model, workdir / f"model{suffix}", tokenizer=tokenizer)
            if has_lora(model):  # adapters merged above; alone here
                save_lora_adapter(model, workdir / f"adapter{suffix}",
                                  base_model_name_or_path=base_name)
