"""SEET's slow-loop counterfactual loss (registered "counterfactual").

A counterfactual record pairs, on the same failing prefix, the anchor step (a verified-correct
step: the chosen sequence) with the step the policy actually took (the failed step: the rejected
sequence). The loss raises the likelihood of the anchor step's tokens given the prefix,
  L_cf = - sum_p w_p sum_t m_pt log pi(a_pt | prefix, a_p,<t) / sum_p w_p sum_t m_pt,
a weighted token-mean cross-entropy, optionally plus `preference_weight` times a DPO-style
preference of the anchor step over the failed step (Rafailov et al. 2023; reference-free when
`reference_free`, i.e. the margin log pi(a) - log pi(f) as in SimPO-style objectives without
length normalisation). The whole term enters the objective with its own weight (lambda_cf):
total = policy loss + lambda_cf * L_cf + ...
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from seetjax.losses.aggregation import Denominators, aggregate
from seetjax.losses.dpo import DPOConfig, dpo_loss
from seetjax.losses.registry import check, register

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class CounterfactualConfig:
    """preference_weight: weight of the anchor-over-failed preference (0: cross-entropy only);
    beta: its DPO temperature; reference_free: margin without reference log-likelihoods."""

    preference_weight: float = 0.0
    beta: float = 0.1
    reference_free: bool = False

    def __post_init__(self):
        check(self.preference_weight >= 0, self, "preference_weight", "must be >= 0")
        check(self.beta > 0, self, "beta", "must be > 0")

    @property
    def needs_reference(self) -> bool:
        return self.preference_weight > 0 and not self.reference_free

    @property
    def preference(self) -> DPOConfig:
        return DPOConfig(kind="sigmoid", beta=self.beta)


@register("counterfactual", CounterfactualConfig)
def counterfactual_loss(anchor_logprobs: Array, anchor_mask: Array, weights: Array,
                        config: CounterfactualConfig, *, failed_logprob_sums: Array | None = None,
                        ref_anchor: Array | None = None, ref_failed: Array | None = None,
                        denominators: Denominators | None = None,
                        total_weight: Array | None = None) -> tuple[Array, dict]:
    """anchor_logprobs, anchor_mask: [P, T] log pi of the anchor step's tokens and the mask of
    those tokens; weights [P]; failed_logprob_sums [P] and ref_* [P] (sequence log-likelihoods)
    for the preference part. `denominators` (tokens: sum of w m) and `total_weight` (sum of w)
    are the whole batch's when this is a micro-batch's share."""
    token_weights = anchor_mask.astype(jnp.float32) * weights[:, None]
    ce = aggregate(-anchor_logprobs, token_weights, "token-mean", denominators)
    loss = ce
    metrics = {"cf_nll": ce}
    if config.preference_weight > 0:
        if failed_logprob_sums is None:
            raise ValueError("counterfactual_loss: preference_weight > 0 needs failed_logprob_sums")
        if not config.reference_free and (ref_anchor is None or ref_failed is None):
            raise ValueError("counterfactual_loss: the preference needs ref_anchor and ref_failed "
                             "unless reference_free")
        anchor_sums = jnp.sum(anchor_logprobs * anchor_mask, axis=-1)
        refs = (None, None) if config.reference_free else (ref_anchor, ref_failed)
        pref, pref_metrics = dpo_loss(anchor_sums, failed_logprob_sums, *refs, weights,
                                      config.preference, total_weight=total_weight)
        loss = loss + config.preference_weight * pref
        metrics.update(cf_preference_loss=pref,
                       cf_preference_accuracy=pref_metrics["reward_accuracy"])
    return loss, metrics
