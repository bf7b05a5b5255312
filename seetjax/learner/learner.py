"""`Learner`: the compiled update of one model structure, learner config and mesh.

    learner, state = create_learner(model, config)         # state: sharded TrainState
    state, metrics = learner.update(state, batch)          # host floats, tokens/s, MFU
    sampler_params = learner.sampling_params(state)        # for seetjax.sampling.Sampler

`step` is the jitted function itself (state donated: keep the returned one); a batch of the same
shapes and fields never recompiles it (`compile_count`). With `config.pack_rows` the rows are
packed on the host first (`seetjax.learner.packing`): the packed row count is bucketed, so a few
shapes per row count compile.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.learner import packing, targets
from seetjax.learner import sharding as learner_sharding
from seetjax.learner.config import LearnerConfig
from seetjax.learner.forward import sequence_outputs
from seetjax.learner.objective import pair_riders
from seetjax.learner.optimizer import learning_rate_schedule, make_optimizer
from seetjax.learner.state import (
    TrainState,
    cast_like,
    new_train_state,
    prepare_model,
    split_model,
)
from seetjax.learner.step import gradients, train_step
from seetjax.learner.throughput import peak_flops, throughput
from seetjax.models.config import ModelConfig
from seetjax.models.transformer import Transformer
from seetjax.runtime import sharding


class Learner:
    """Holds the jitted functions; all training state lives in the `TrainState` passed around."""

    def __init__(self, graphdef: nnx.GraphDef, model_config: ModelConfig, config: LearnerConfig,
                 mesh: Mesh, state_shardings: Any):
        self.graphdef, self.model_config, self.config, self.mesh = (graphdef, model_config,
                                                                    config, mesh)
        self.rules = learner_sharding.family_rules(model_config)
        step = functools.partial(train_step, graphdef, config, make_optimizer(config.optimizer),
                                 learning_rate_schedule(config.optimizer), mesh, self.rules)
        self._step = jax.jit(step, donate_argnums=(0,), out_shardings=(
            state_shardings, learner_sharding.replicated(mesh)))
        self._gradients = jax.jit(functools.partial(gradients, graphdef, config, mesh,
                                                    self.rules))
        self._logprobs = jax.jit(self._sequence_logprobs)
        self._storage_dtype = jnp.dtype(model_config.param_dtype)
        self._to_storage = jax.jit(functools.partial(cast_like, dtype=self._storage_dtype))
        self.peak_flops = config.peak_flops_per_device or peak_flops(mesh.devices.flat[0])

    def step(self, state: TrainState, batch: TrajectoryBatch) -> tuple[TrainState, dict]:
        """One batch of updates (jitted). `batch` holds this process's rows (the whole batch in
        a single-process run), as numpy or jax arrays."""
        return self._step(state, self.place(self.ready(batch)))

    def update(self, state: TrainState, batch: TrajectoryBatch) -> tuple[TrainState, dict]:
        """`step`, waited for, with metrics as floats plus tokens_per_s and mfu (when the device
        peak is known) over the step's wall time."""
        start = time.perf_counter()
        batch = self.ready(batch)
        state, metrics = self._step(state, self.place(batch))
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        seconds = time.perf_counter() - start
        width = max(s.tokens.shape[1] for s in _row_sets(batch))
        metrics.update(step_seconds=seconds, **padding_shares(batch, metrics["tokens"]),
                       lm_head_share=targets.head_share(_row_sets(batch)),
                       **throughput(
            metrics["tokens"], metrics["flop_tokens"], seconds, self.model_config, width,
            self.mesh.devices.size, self.peak_flops))
        return state, metrics

    def gradients(self, state: TrainState, batch: TrajectoryBatch) -> tuple[nnx.State, dict]:
        """The gradients (and metrics) of the first update `step` would make, without making
        it: for analysis and for checking layouts and accumulation against each other."""
        return self._gradients(state, self.place(self.ready(batch)))

    def ready(self, batch: TrajectoryBatch) -> TrajectoryBatch:
        """`batch` validated and, with `config.pack_rows`, packed for the chunks and devices of
        this learner's step (`packing.pack_batch`; with `config.share_prefixes` its rows first
        reordered within their mini-batches so that rows beginning alike share a micro-batch
        and device, `packing.sharing_order`); with `config.target_logits`, its model rows told
        how many target tokens they hold (`targets.with_target_widths`)."""
        validate_batch(batch, self.config, self.batch_divisor)
        if self.config.pack_rows:
            updates, micros = self.config.mini_batches, self.config.micro_batches
            devices = self.local_batch_devices
            if self.config.share_prefixes and micros * devices > 1:
                batch = packing.regrouped(batch, updates, micros, devices)
            batch = packing.pack_batch(batch, updates * micros, devices,
                                       self.config.share_prefixes, pair_riders(self.config),
                                       micros)
        if self.config.target_logits:
            batch = targets.with_target_widths(batch)
        return batch

    @property
    def local_batch_devices(self) -> int:
        """This process's share of the devices the batch axis is split over."""
        return max(1, sharding.batch_multiple(self.mesh, self.rules) // jax.process_count())

    @property
    def batch_divisor(self) -> int:
        """Global rows must be a multiple of this: chunks (mini x micro) times the batch devices."""
        return (self.config.mini_batches * self.config.micro_batches
                * sharding.batch_multiple(self.mesh, self.rules))

    def place(self, batch: Any) -> Any:
        """Global arrays, rows over the batch axes, from this process's rows."""
        return learner_sharding.global_batch(batch, self.mesh, self.rules)

    def _sequence_logprobs(self, params: nnx.State, frozen: nnx.State,
                           seqs: TokenSequences) -> jax.Array:
        return sequence_outputs(self.graphdef, (params, frozen), seqs,
                                temperature=self.config.temperature,
                                chunk=self.config.logprob_chunk).logprobs

    def logprobs(self, state: TrainState, seqs: TokenSequences) -> jax.Array:
        """[N, T] log-probs of every token as the loss terms see them (entry t: token t; through
        packed rows with `config.pack_rows`, as in the update, and 0 on padding then)."""
        if self.config.pack_rows:
            seqs = (packing.pack_shared_rows if self.config.share_prefixes
                    else packing.pack_rows)(seqs)
        return self._logprobs(state.params, state.frozen, self.place(seqs))

    def model(self, state: TrainState) -> Transformer:
        """The current model with its parameters in the storage dtype (`ModelConfig.param_dtype`):
        for an f32 model the state's own arrays (no copy), otherwise the masters cast to it."""
        params = state.params
        if self._storage_dtype != jnp.float32:
            params = self._to_storage(params)
        return nnx.merge(self.graphdef, params, state.frozen)

    def sampling_params(self, state: TrainState) -> nnx.State:
        """`nnx.state` of the current model in its storage dtype: the params argument of a
        Sampler built on `self.model(state)` (the same arrays as the state's for f32 models)."""
        return nnx.state(self.model(state))

    def compile_count(self) -> int:
        return self._step._cache_size()


def create_learner(model: Transformer, config: LearnerConfig, *, mesh: Mesh | None = None,
                   seed: int = 0) -> tuple[Learner, TrainState]:
    """A Learner for `model` and its initial TrainState, sharded on `mesh` (default: the config's
    mesh over all devices). With LoRA, adapters are added to a copy of `model`."""
    mesh = mesh if mesh is not None else learner_sharding.mesh_from_config(config.mesh)
    rules = learner_sharding.family_rules(model.config)
    graphdef, params, frozen = split_model(prepare_model(model, config.lora, seed),
                                           config.lora is not None)
    init = functools.partial(new_train_state, optimizer=make_optimizer(config.optimizer),
                             keep_reference=config.needs_reference and config.lora is None,
                             seed=seed)
    shardings = learner_sharding.tree_shardings(jax.eval_shape(init, params, frozen), mesh, rules)
    # Parameters are placed first so the initial state is built where it will live.
    params = jax.device_put(params, sharding.state_shardings(params, mesh, rules))
    frozen = jax.device_put(frozen, sharding.state_shardings(frozen, mesh, rules))
    state = jax.jit(init, out_shardings=shardings)(params, frozen)
    return Learner(graphdef, model.config, config, mesh, shardings), state


def _row_sets(batch: TrajectoryBatch) -> list[TokenSequences]:
    rows = [batch.sequences]
    if batch.pairs is not None:
        rows += [batch.pairs.chosen, batch.pairs.rejected]
    return [r for r in rows if r is not None]


def padding_shares(batch: TrajectoryBatch, tokens: float) -> dict[str, float]:
    """For `batch` with `tokens` real ones: padding's share of the slots of the rows the model
    ran over (the packed rows, when packed; padding_share) and of one sequence per row
    (padding_share_unpacked), and the share of the real tokens that shared prefixes saved
    computing (shared_prefix_share, `config.share_prefixes`; from this process's rows)."""
    rows = _row_sets(batch)
    model_rows = packing.model_rows(rows)
    real = sum(int(np.count_nonzero(np.asarray(r.segment_ids))) for r in rows)
    computed = sum(int(np.count_nonzero(np.asarray(r.segment_ids))) for r in model_rows)
    shared = 1.0 - computed / real if real else 0.0

    def share(sets: list[TokenSequences], real_tokens: float) -> float:
        return 1.0 - real_tokens / (sum(r.tokens.size for r in sets) * jax.process_count())

    return {"padding_share": share(model_rows, tokens * (1.0 - shared)),
            "padding_share_unpacked": share(rows, tokens), "shared_prefix_share": shared}


def validate_batch(batch: TrajectoryBatch, config: LearnerConfig, divisor: int) -> None:
    """Raises ValueError naming the first field the configured losses need and `batch` lacks, or
    a row count the chunking cannot split."""
    names = {t.name for t in config.losses}

    def need(ok: bool, field: str, why: str) -> None:
        if not ok:
            raise ValueError(f"TrajectoryBatch.{field} is needed: {why}")

    if names & {"policy_gradient", "value", "sft"}:
        need(batch.sequences is not None, "sequences", f"losses {sorted(names)}")
    if "policy_gradient" in names:
        need(batch.old_logprobs is not None, "old_logprobs", "policy_gradient's importance ratio")
        need(batch.rewards is not None or batch.token_rewards is not None
             or batch.advantages is not None, "rewards",
             "the advantage estimator (or pass token_rewards, or advantages)")
        need((batch.token_rewards is None) == (batch.reward_mask is None), "reward_mask",
             "token_rewards and reward_mask come together")
        if config.advantage in ("grpo", "rloo", "gigpo") and batch.advantages is None:
            need(batch.group_ids is not None, "group_ids", f"{config.advantage} advantages")
        if getattr(config.advantage_config, "needs_step_keys", False) and batch.advantages is None:
            need(batch.step_keys is not None, "step_keys", f"{config.advantage}'s step groups")
            if batch.step_keys.shape != batch.sequences.tokens.shape:
                raise ValueError(f"TrajectoryBatch.step_keys has shape {batch.step_keys.shape}: "
                                 f"must be the tokens' {batch.sequences.tokens.shape}")
        if getattr(config.advantage_config, "horizon", "episode") == "turn" and (
                batch.advantages is None):
            need(batch.turn_starts is not None, "turn_starts",
                 f"{config.advantage}'s returns with horizon 'turn'")
            if batch.turn_starts.shape != batch.sequences.tokens.shape:
                raise ValueError(f"TrajectoryBatch.turn_starts has shape "
                                 f"{batch.turn_starts.shape}: must be the tokens' "
                                 f"{batch.sequences.tokens.shape}")
        if batch.advantages is not None and config.advantage_config.needs_values:
            raise ValueError("TrajectoryBatch.advantages must be None with a token-level "
                             f"estimator ({config.advantage}): it computes per-token advantages")
    if names & {"dpo", "counterfactual"}:
        need(batch.pairs is not None, "pairs", "dpo / counterfactual losses")
    for rows in _row_sets(batch):
        n = rows.tokens.shape[0] * jax.process_count()
        if n % divisor:
            raise ValueError(f"batch of {n} rows: must be a multiple of {divisor} "
                             "(mini_batches x micro_batches x data x fsdp devices)")
