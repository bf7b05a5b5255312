"""The jitted update: one batch in, `mini_batches` optimizer updates out.

Inside one `jax.jit` (state donated, NamedShardings on the mesh): quantities fixed before the
update (reference log-probs, behaviour values, advantages) over the whole batch; then for each
mini-batch, gradients accumulated over its micro-batches with `lax.scan` (each micro-batch's loss
normalised by the mini-batch's totals, so the sum is the global weighted mean), one optax update,
and the update skipped (parameters and optimizer state kept) when the loss or gradients are not
finite.

Rows are dealt to chunks with a stride (chunk c gets rows c, c + n, ...), so every chunk keeps
rows on every device of the batch axes: no device idles while another works on its micro-batch.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh

from seetjax.batch import TrajectoryBatch
from seetjax.learner.config import LearnerConfig
from seetjax.learner.objective import StepModel, Totals, batch_totals, flop_tokens, micro_objective, prepare
from seetjax.learner.state import TrainState
from seetjax.runtime import sharding

Array = jax.Array


class RowChunks:
    """Strided splitting of row-major pytrees into chunks that stay spread over the batch axes."""

    def __init__(self, mesh: Mesh, rules):
        self.mesh, self.rules = mesh, rules

    def split(self, tree: Any, n: int) -> Any:
        """[B, ...] -> [n, B / n, ...] with chunk c holding rows c, c + n, c + 2n, ..."""

        def one(x: Array) -> Array:
            chunks = x.reshape(x.shape[0] // n, n, *x.shape[1:]).swapaxes(0, 1)
            axes = (None, "batch") + (None,) * (x.ndim - 1)
            return jax.lax.with_sharding_constraint(
                chunks, sharding.named(self.mesh, axes, chunks.shape, self.rules))

        return jax.tree.map(one, tree)

    @staticmethod
    def merge(tree: Any) -> Any:
        """Inverse of `split`."""
        return jax.tree.map(lambda x: x.swapaxes(0, 1).reshape(-1, *x.shape[2:]), tree)

    def map(self, f: Callable, tree: Any, n: int) -> Any:
        """f applied chunk by chunk (bounded memory), results back in row order."""
        return self.merge(jax.lax.map(f, self.split(tree, n)))


def reference_states(state: TrainState, config: LearnerConfig) -> tuple[nnx.State, ...] | None:
    if config.lora is not None:  # the base model: adapters at zero
        return jax.tree.map(jnp.zeros_like, state.params), state.frozen
    if state.reference is None:
        return None
    return state.reference, state.frozen


def _apply(optimizer: optax.GradientTransformation, grads: nnx.State, opt_state: Any,
           params: nnx.State) -> tuple[nnx.State, Any]:
    """One optax update applied: the new parameters and optimizer state."""
    deltas, new_opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, deltas), new_opt_state


def _layout(graphdef: nnx.GraphDef, config: LearnerConfig, mesh: Mesh, rules, state: TrainState,
            batch: TrajectoryBatch) -> tuple[StepModel, Any, Totals, dict]:
    """Everything fixed before the updates: the prepared batch as [U, M, rows, ...] chunks (U
    mini-batches of M micro-batches), each mini-batch's totals [U], and the batch metrics."""
    updates, micros = config.mini_batches, config.micro_batches
    chunks = RowChunks(mesh, rules)
    model = StepModel(graphdef, state.frozen, reference_states(state, config), config)
    prepared, metrics = prepare(model, state.params, batch, updates * micros, chunks.map)
    layout = jax.tree.map(lambda x: x.reshape(updates, micros, *x.shape[1:]),
                          chunks.split(prepared, updates * micros))
    totals = jax.vmap(batch_totals)(
        jax.tree.map(lambda x: x.reshape(updates, -1, *x.shape[3:]), layout))
    return model, layout, totals, metrics


def gradient_variance(squares: Array, total: nnx.State, m: int) -> Array:
    """The variance of the gradient estimate between micro-batches: with g_k micro-batch k's
    share of the mini-batch gradient g = sum_k g_k, each M g_k estimates g from 1/M of the rows,
    and V = 1/(M-1) sum_k ||M g_k - g||^2 = M/(M-1) (M sum_k ||g_k||^2 - ||g||^2), the trace of
    their covariance (`squares` = sum_k ||g_k||^2); 0.0 for one micro-batch."""
    if m < 2:
        return jnp.zeros((), jnp.float32)
    return m / (m - 1) * (m * squares - jnp.square(optax.tree.norm(total)))


def minibatch_gradients(model: StepModel, params: nnx.State, micro_batches: Any,
                        t: Totals) -> tuple[nnx.State, dict]:
    """Gradients and metrics summed over the micro-batches [M, rows, ...] of one mini-batch:
    the mini-batch's global weighted mean, since every share is normalised by `t`; and
    `grad_variance` between the micro-batches' estimates (`gradient_variance`)."""

    def accumulate(carry, micro):
        acc, squares = carry
        out, grads = jax.value_and_grad(micro_objective, has_aux=True)(params, model, micro, t)
        return (jax.tree.map(jnp.add, acc, grads),
                squares + jnp.square(optax.tree.norm(grads))), out

    # The gradients' zeros come from the parameters, and the (loss, metrics) of each micro-batch
    # leave the scan stacked: a zero carry for them would need their structure, i.e. a second
    # trace of the whole forward and backward (jax.eval_shape), ~40% of tracing the update.
    zeros = jax.tree.map(jnp.zeros_like, params)
    (grads, squares), stacked = jax.lax.scan(
        accumulate, (zeros, jnp.zeros((), jnp.float32)), micro_batches)
    m = jax.tree.leaves(micro_batches)[0].shape[0]
    # summed from zeros in micro-batch order, as the carry summed them (-0.0 stays +0.0)
    slices = [jax.tree.map(operator.itemgetter(i), stacked) for i in range(m)]
    _, metrics = functools.reduce(lambda a, b: jax.tree.map(jnp.add, a, b), slices,
                                  jax.tree.map(jnp.zeros_like, slices[0]))
    return grads, {**metrics, "grad_variance": gradient_variance(squares, grads, m)}


def gradients(graphdef: nnx.GraphDef, config: LearnerConfig, mesh: Mesh, rules,
              state: TrainState, batch: TrajectoryBatch) -> tuple[nnx.State, dict]:
    """The gradients and metrics of the first update `train_step` would make, not applied."""
    model, layout, totals, _ = _layout(graphdef, config, mesh, rules, state, batch)
    first = jax.tree.map(lambda x: x[0], (layout, totals))
    return minibatch_gradients(model, state.params, *first)


def train_step(graphdef: nnx.GraphDef, config: LearnerConfig,
               optimizer: optax.GradientTransformation, schedule: optax.Schedule, mesh: Mesh,
               rules, state: TrainState, batch: TrajectoryBatch) -> tuple[TrainState, dict]:
    """One batch of updates; returns the new state and metrics (means over the mini-batch
    updates, `skipped` their count)."""
    model, layout, totals, metrics = _layout(graphdef, config, mesh, rules, state, batch)

    def update(carry, xs):
        params, opt_state, step, skipped = carry
        grads, update_metrics = minibatch_gradients(model, params, *xs)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(update_metrics["loss"]) & jnp.isfinite(grad_norm)
        # A cond, not jnp.where(finite, new, old): the select kept the old state alive beside
        # the new, and XLA copied two thirds of it every update (experiments/benchmarks/anatomy.py)
        new_params, new_opt_state = jax.lax.cond(
            finite, lambda: _apply(optimizer, grads, opt_state, params),
            lambda: (params, opt_state))
        update_metrics.update(grad_norm=grad_norm, learning_rate=schedule(step),
                              skipped=(~finite).astype(jnp.int32))
        carry = (new_params, new_opt_state,
                 step + finite.astype(jnp.int32), skipped + (~finite).astype(jnp.int32))
        return carry, update_metrics

    init = (state.params, state.opt_state, state.step, state.skipped)
    (params, opt_state, step, skipped), per_update = jax.lax.scan(update, init, (layout, totals))
    metrics.update({k: jnp.mean(v, axis=0) for k, v in per_update.items()})
    # before any update the learner's log-probs are those the sampler's should equal
    metrics.update({k: v[0] for k, v in per_update.items() if k.startswith("mismatch_")})
    metrics["skipped"] = jnp.sum(per_update["skipped"])
    metrics["tokens"] = count_tokens(batch)
    metrics["flop_tokens"] = flop_tokens(config, batch)
    return state.replace(params=params, opt_state=opt_state, step=step, skipped=skipped), metrics


def count_tokens(batch: TrajectoryBatch) -> Array:
    """Real (non-padding) tokens of the batch."""
    rows = [batch.sequences]
    if batch.pairs is not None:
        rows += [batch.pairs.chosen, batch.pairs.rejected]
    return sum(jnp.sum(s.segment_ids != 0) for s in rows if s is not None).astype(jnp.float32)
