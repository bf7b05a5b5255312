"""The optax chain: global-norm clipping, then AdamW on a warmup + cosine schedule."""

from __future__ import annotations

import jax
import optax

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


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    adamw = optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                        weight_decay=cfg.weight_decay, mask=_decay_mask)
    if cfg.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
    return adamw
