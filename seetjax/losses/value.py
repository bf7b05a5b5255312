"""PPO's clipped value loss (registered as "value").

Schulman et al. (2017) / the PPO2 baselines: with V_clip = V_old + clip(V - V_old, -eps, eps),
  l = 1/2 max((V - R)^2, (V_clip - R)^2)
over the masked tokens, R the GAE returns.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from seetjax.losses.aggregation import AGGREGATIONS, Denominators, aggregate, masked_mean
from seetjax.losses.registry import check, register

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ValueLossConfig:
    """clip: eps of the value clipping (None: plain squared error); aggregation: see
    aggregation.py."""

    clip: float | None = 0.2
    aggregation: str = "token-mean"

    def __post_init__(self):
        check(self.clip is None or self.clip > 0, self, "clip", "must be > 0 or None")
        check(self.aggregation in AGGREGATIONS[:3], self, "aggregation",
              f"must be in {AGGREGATIONS[:3]}")


@register("value", ValueLossConfig)
def value_loss(values: Array, old_values: Array, returns: Array, mask: Array,
               config: ValueLossConfig, *,
               denominators: Denominators | None = None) -> tuple[Array, dict]:
    """Clipped value loss over [B, T] tokens under `mask`; returns (loss, metrics)."""
    mask = mask.astype(jnp.float32)
    error = jnp.square(values - returns)
    if config.clip is None:
        per_token, clipped = error, jnp.zeros_like(error, bool)
    else:
        v_clip = old_values + jnp.clip(values - old_values, -config.clip, config.clip)
        error_clip = jnp.square(v_clip - returns)
        per_token, clipped = jnp.maximum(error, error_clip), error_clip > error
    loss = 0.5 * aggregate(per_token, mask, config.aggregation, denominators)
    return loss, {"value_loss": loss,
                  "value_clip_fraction": masked_mean(clipped, mask, denominators),
                  "value": masked_mean(values, mask, denominators)}
