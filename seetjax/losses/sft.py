"""Supervised fine-tuning: masked cross-entropy with optional label smoothing (registered "sft").

With smoothing eps (Szegedy et al. 2016) the target is (1 - eps) one-hot + eps uniform, so
  l = -(1 - eps) log p(y) - eps mean_v log p(v)
per masked token, reduced by the configured aggregation.
"""

from __future__ import annotations

import dataclasses

import jax

from seetjax.losses.aggregation import AGGREGATIONS, Denominators, aggregate, masked_mean
from seetjax.losses.registry import check, register

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    label_smoothing: float = 0.0
    aggregation: str = "token-mean"

    def __post_init__(self):
        check(0.0 <= self.label_smoothing < 1.0, self, "label_smoothing", "must be in [0, 1)")
        check(self.aggregation in AGGREGATIONS[:3], self, "aggregation",
              f"must be in {AGGREGATIONS[:3]}")


@register("sft", SFTConfig)
def sft_loss(logprobs: Array, mean_logprobs: Array, mask: Array, config: SFTConfig, *,
             denominators: Denominators | None = None) -> tuple[Array, dict]:
    """Cross-entropy of the masked target tokens. logprobs: log p(y_t) [B, T]; mean_logprobs: the
    vocabulary mean of log p at each position [B, T] (only used with label smoothing)."""
    eps = config.label_smoothing
    nll = -logprobs
    per_token = nll if eps == 0 else (1.0 - eps) * nll - eps * mean_logprobs
    loss = aggregate(per_token, mask, config.aggregation, denominators)
    return loss, {"sft_loss": loss, "nll": masked_mean(nll, mask, denominators)}
