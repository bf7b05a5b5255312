"""Direct preference optimisation on (chosen, rejected) pairs (registered "dpo").

With h = (log pi(c) - log pi_ref(c)) - (log pi(r) - log pi_ref(r)) over each sequence's masked
tokens (reference log-likelihoods precomputed):
  sigmoid  -(1 - eps) log sigma(beta h) - eps log sigma(-beta h)   DPO (Rafailov et al. 2023);
           eps > 0 is conservative DPO (cDPO, Mitchell 2023: labels flipped with probability eps)
  hinge    max(0, 1 - beta h)                                      SLiC (Zhao et al. 2023)
  ipo      (h - 1 / (2 beta))^2                                     IPO (Azar et al. 2023)
Pairs are averaged with their weights.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from seetjax.losses.registry import check, register

Array = jax.Array

DPO_KINDS = ("sigmoid", "hinge", "ipo")


@dataclasses.dataclass(frozen=True)
class DPOConfig:
    kind: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0

    def __post_init__(self):
        check(self.kind in DPO_KINDS, self, "kind", f"must be in {DPO_KINDS}")
        check(self.beta > 0, self, "beta", "must be > 0")
        check(0.0 <= self.label_smoothing < 0.5, self, "label_smoothing", "must be in [0, 0.5)")
        check(self.label_smoothing == 0 or self.kind == "sigmoid", self, "label_smoothing",
              "conservative DPO needs kind='sigmoid'")

    @property
    def needs_reference(self) -> bool:
        return True


def preference_losses(margin: Array, config: DPOConfig) -> Array:
    """Per-pair loss of the log-ratio margin h [P]."""
    if config.kind == "sigmoid":
        eps = config.label_smoothing
        z = config.beta * margin
        return -(1.0 - eps) * jax.nn.log_sigmoid(z) - eps * jax.nn.log_sigmoid(-z)
    if config.kind == "hinge":
        return jax.nn.relu(1.0 - config.beta * margin)
    return jnp.square(margin - 1.0 / (2.0 * config.beta))


def weighted_mean(values: Array, weights: Array, total_weight: Array | None = None) -> Array:
    """sum(w v) / total (default sum(w)): a share of the whole batch's mean when total is given."""
    total = jnp.sum(weights) if total_weight is None else total_weight
    return jnp.sum(values * weights) / jnp.maximum(total, 1e-8)


@register("dpo", DPOConfig)
def dpo_loss(chosen: Array, rejected: Array, ref_chosen: Array | None,
             ref_rejected: Array | None, weights: Array, config: DPOConfig, *,
             total_weight: Array | None = None) -> tuple[Array, dict]:
    """chosen, rejected: [P] sequence log-likelihoods under the policy (sums over masked tokens);
    ref_*: the same under the reference, or None for a reference-free margin (pi_ref uniform
    over the pair). Returns (loss, metrics)."""
    chosen_reward = chosen - (0.0 if ref_chosen is None else ref_chosen)
    rejected_reward = rejected - (0.0 if ref_rejected is None else ref_rejected)
    margin = chosen_reward - rejected_reward
    loss = weighted_mean(preference_losses(margin, config), weights, total_weight)
    mean = lambda v: weighted_mean(v, weights, total_weight)  # noqa: E731
    return loss, {"dpo_loss": loss,
                  "reward_accuracy": mean((margin > 0).astype(jnp.float32)),
                  "reward_margin": mean(config.beta * margin),
                  "chosen_reward": mean(config.beta * chosen_reward),
                  "rejected_reward": mean(config.beta * rejected_reward)}
