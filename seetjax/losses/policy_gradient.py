"""The clipped policy-gradient loss and its variants (registered as "policy_gradient").

PPO's clipped surrogate (Schulman et al. 2017) on r = pi(y) / pi_old(y):
  l = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))
with separate low/high epsilon (DAPO's clip-higher, Yu et al. 2025), dual clip for A < 0
(l <= -c A, Ye et al. 2020), a clamp of |log r| before the exp for numerical safety, and
optionally
- GSPO (Zheng et al. 2025): one ratio per sequence, the geometric mean of its token ratios, in
  the GSPO-token form r_t = sg[s_i] pi(y_t) / sg[pi(y_t)] (value s_i, gradient s_i grad log pi);
- truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
  Off-Policy RL Training"): each token's loss times min(pi_old(y) / pi_sampler(y), C) when the
  learner's own old log-probs differ from the sampler's;
- a KL penalty to the reference policy (k1/k2/k3) added to the loss (GRPO, Shao et al. 2024), or
  left out here when it is folded into the reward instead;
- an entropy bonus (PPO).
Aggregation is one of `seetjax.losses.aggregation.AGGREGATIONS`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from seetjax.losses.aggregation import AGGREGATIONS, Denominators, aggregate, masked_mean
from seetjax.losses.kl import KL_ESTIMATORS, kl_estimate
from seetjax.losses.registry import check, register

Array = jax.Array

RATIO_LEVELS = ("token", "sequence")


@dataclasses.dataclass(frozen=True)
class PolicyGradientConfig:
    """clip_low / clip_high: eps of the ratio's floor 1 - clip_low and ceiling 1 + clip_high
    (None: that side unclipped); dual_clip: c > 1 or None; ratio_level: 'token' (PPO, GRPO) or
    'sequence' (GSPO); log_ratio_clamp: bound on |log r|; tis_cap: C of truncated importance
    sampling, or None; kl_coef, kl_estimator: the KL penalty (in the loss unless kl_in_reward,
    which subtracts kl_coef * sum_t KL_t from each trajectory's reward before the advantages);
    entropy_coef: entropy bonus; aggregation, norm_constant: see aggregation.py (norm_constant is
    required by 'seq-mean-token-sum-norm')."""

    clip_low: float | None = 0.2
    clip_high: float | None = 0.2
    dual_clip: float | None = None
    ratio_level: str = "token"
    log_ratio_clamp: float = 20.0
    tis_cap: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False
    entropy_coef: float = 0.0
    aggregation: str = "token-mean"
    norm_constant: float | None = None

    def __post_init__(self):
        for name in ("clip_low", "clip_high"):
            value = getattr(self, name)
            check(value is None or value >= 0, self, name, "must be >= 0 or None")
        check(self.clip_low is None or self.clip_low < 1, self, "clip_low", "must be < 1")
        check(self.dual_clip is None or self.dual_clip > 1, self, "dual_clip", "must be > 1")
        check(self.ratio_level in RATIO_LEVELS, self, "ratio_level", f"must be in {RATIO_LEVELS}")
        check(self.log_ratio_clamp > 0, self, "log_ratio_clamp", "must be > 0")
        check(self.tis_cap is None or self.tis_cap >= 1, self, "tis_cap", "must be >= 1 or None")
        check(self.kl_coef >= 0, self, "kl_coef", "must be >= 0")
        check(self.kl_estimator in KL_ESTIMATORS, self, "kl_estimator",
              f"must be in {KL_ESTIMATORS}")
        check(self.aggregation in AGGREGATIONS, self, "aggregation", f"must be in {AGGREGATIONS}")
        check(self.aggregation != "seq-mean-token-sum-norm" or (self.norm_constant or 0) > 0,
              self, "norm_constant", "must be > 0 with aggregation 'seq-mean-token-sum-norm'")

    @property
    def needs_reference(self) -> bool:
        return self.kl_coef > 0


def importance_log_ratio(logprobs: Array, old_logprobs: Array, mask: Array, level: str,
                         clamp: float) -> Array:
    """log r per token: token level log pi - log pi_old; sequence level (GSPO) the masked mean
    of those over the row, carried by each token as sg[mean] + log pi - sg[log pi]."""
    log_ratio = logprobs - old_logprobs
    if level == "sequence":
        per_seq = jnp.sum(log_ratio * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)
        sg = jax.lax.stop_gradient
        log_ratio = sg(per_seq)[:, None] + logprobs - sg(logprobs)
    return jnp.clip(log_ratio, -clamp, clamp)


def clipped_surrogate(ratio: Array, advantages: Array, clip_low: float | None,
                      clip_high: float | None, dual_clip: float | None) -> tuple[Array, Array]:
    """Per-token PPO loss max(-A r, -A clip(r)) with optional dual clip; also whether the clipped
    branch was taken (its gradient is then zero)."""
    lo = -jnp.inf if clip_low is None else 1.0 - clip_low
    hi = jnp.inf if clip_high is None else 1.0 + clip_high
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, lo, hi)
    loss = jnp.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual_clip is not None:
        bound = -advantages * dual_clip
        dual = (advantages < 0) & (loss > bound)
        loss = jnp.where(dual, bound, loss)
        was_clipped |= dual
    return loss, was_clipped


@register("policy_gradient", PolicyGradientConfig)
def policy_gradient_loss(logprobs: Array, old_logprobs: Array, advantages: Array, mask: Array,
                         config: PolicyGradientConfig, *, ref_logprobs: Array | None = None,
                         entropy: Array | None = None, sampler_logprobs: Array | None = None,
                         denominators: Denominators | None = None) -> tuple[Array, dict]:
    """Loss and metrics of the clipped policy gradient over [B, T] tokens under `mask`.

    advantages: [B] (per trajectory) or [B, T]. ref_logprobs is needed when kl_coef > 0 (and the
    KL is metered whenever given); entropy when entropy_coef > 0; sampler_logprobs when tis_cap is
    set (`old_logprobs` then being the learner's own log-probs under the behaviour parameters).
    """
    mask = mask.astype(jnp.float32)
    if advantages.ndim == 1:
        advantages = advantages[:, None]
    log_ratio = importance_log_ratio(logprobs, old_logprobs, mask, config.ratio_level,
                                     config.log_ratio_clamp)
    ratio = jnp.exp(log_ratio)
    per_token, was_clipped = clipped_surrogate(ratio, advantages, config.clip_low,
                                               config.clip_high, config.dual_clip)
    metrics = {}
    if config.tis_cap is not None:
        if sampler_logprobs is None:
            raise ValueError("policy_gradient_loss: tis_cap is set but sampler_logprobs is None")
        tis = jnp.minimum(jnp.exp(old_logprobs - sampler_logprobs), config.tis_cap)
        per_token = per_token * jax.lax.stop_gradient(tis)
        metrics["tis_weight"] = masked_mean(tis, mask, denominators)
    agg = dict(mode=config.aggregation, denominators=denominators,
               norm_constant=config.norm_constant or 1.0)
    pg_loss = aggregate(per_token, mask, **agg)
    loss = pg_loss
    metrics.update(pg_loss=pg_loss, clip_fraction=masked_mean(was_clipped, mask, denominators),
                   ratio=masked_mean(ratio, mask, denominators))
    if ref_logprobs is not None:
        kl = kl_estimate(logprobs, ref_logprobs, config.kl_estimator)
        metrics["kl"] = masked_mean(kl, mask, denominators)
        if config.kl_coef > 0 and not config.kl_in_reward:
            loss = loss + config.kl_coef * aggregate(kl, mask, **agg)
    elif config.kl_coef > 0 and not config.kl_in_reward:
        raise ValueError("policy_gradient_loss: kl_coef > 0 but ref_logprobs is None")
    if config.entropy_coef > 0:
        if entropy is None:
            raise ValueError("policy_gradient_loss: entropy_coef > 0 but entropy is None")
        loss = loss - config.entropy_coef * aggregate(entropy, mask, **agg)
    return loss, metrics
