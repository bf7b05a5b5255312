"""The optax chain: global-norm clipping, then AdamW on a warmup + cosine schedule, then the held
slices zeroed (`OptimizerConfig.held`)."""

from __future__ import annotations

import jax
import optax

from seetjax.errors import invalid
from seetjax.learner.config import OptimizerConfig


def learning_rate_schedule(cfg: OptimizerConfig) -> optax.Schedule:
    """Linear warmup from 0 to the peak over `warmup_steps`, then cosine decay to
    `final_lr_fraction` of the peak over `decay_steps` (0: constant)."""
    peak = cfg.learning_rate
    if cfg.decay_steps == 0:
        if cfg.warmup_steps == 0:
            return optax.constant_schedule(peak)
        return optax.linear_schedule(0.0, peak, cfg.warmup_steps)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak, warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.warmup_steps + cfg.decay_steps, end_value=peak * cfg.final_lr_fraction)


def _decay_mask(params):
    # Matrices decay; vectors (RMSNorm scales, biases) do not.
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def param_path(path: tuple) -> str:
    """The dotted name of a parameter's pytree path: "layers.0.self_attn.q_proj.kernel"."""
    names = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
    return ".".join(names[:-1] if names and names[-1] == "value" else names)


def hold_slices(held: tuple[tuple[str, int], ...]) -> optax.GradientTransformation:
    """Zeroes the update of the first n entries of the last axis of each parameter named in
    `held` ((path, n) pairs), weight decay included, so those entries never change. A path that
    names no parameter is an error at the first update."""
    wanted = dict(held)

    def update(updates, state, params=None):
        del params
        found = set()

        def zero(path, u):
            name = param_path(path)
            if name not in wanted:
                return u
            found.add(name)
            if wanted[name] > u.shape[-1]:
                raise invalid("OptimizerConfig", "held", (name, wanted[name]), f"{name} has "
                              f"{u.shape[-1]} entries on its last axis, fewer than the "
                              f"{wanted[name]} held")
            return u.at[..., :wanted[name]].set(0)

        out = jax.tree_util.tree_map_with_path(zero, updates)
        missing = sorted(set(wanted) - found)
        if missing:
            raise invalid("OptimizerConfig", "held", missing, "no parameter of that name")
        return out, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    adamw = optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                        weight_decay=cfg.weight_decay, mask=_decay_mask)
    chain = [optax.clip_by_global_norm(cfg.max_grad_norm)] if cfg.max_grad_norm > 0 else []
    chain.append(adamw)
    if cfg.held:
        chain.append(hold_slices(cfg.held))
    return optax.chain(*chain) if len(chain) > 1 else adamw
