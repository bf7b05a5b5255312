"""Advantage estimators, registered by name (kind "advantage").

Sequence-level estimators map per-trajectory rewards [B] to advantages [B] and per-row weights [B]
(0.0 for padding rows and for rows dropped by `filter_equal_groups`): `grpo`, `rloo`, `reinforce`.
The token-level estimator `gae` maps per-token rewards and values [B, T] to advantages and returns.
Groups are given by arbitrary integer ids; group statistics use a [B, B] same-group matrix, exact
for any ids and cheap for rollout batch sizes.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from seetjax.losses.registry import check, register

Array = jax.Array

GROUP_STDS = ("group", "batch", "none")


def _same_group(group_ids: Array, valid: Array) -> Array:
    """[B, B] f32: 1 where rows i and j are both real and in the same group."""
    v = valid > 0
    return ((group_ids[:, None] == group_ids[None, :]) & v[:, None] & v[None, :]).astype(
        jnp.float32)


def _group_mean_count(rewards: Array, same: Array) -> tuple[Array, Array]:
    count = jnp.sum(same, axis=1)
    return same @ rewards / jnp.maximum(count, 1.0), count


def equal_reward_groups(rewards: Array, group_ids: Array, valid: Array) -> Array:
    """[B] bool: rows whose group has a single distinct reward (no learning signal: DAPO's dynamic
    sampling, Yu et al. 2025, drops them)."""
    same = _same_group(group_ids, valid) > 0
    high = jnp.max(jnp.where(same, rewards[None, :], -jnp.inf), axis=1)
    low = jnp.min(jnp.where(same, rewards[None, :], jnp.inf), axis=1)
    return high == low


def _row_weights(rewards: Array, group_ids: Array, valid: Array, filter_equal: bool) -> Array:
    keep = valid > 0
    if filter_equal:
        keep &= ~equal_reward_groups(rewards, group_ids, valid)
    return keep.astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class GRPOAdvantageConfig:
    """std: 'group' = GRPO (Shao et al. 2024, DeepSeekMath), Bessel-corrected group std;
    'none' = Dr. GRPO (Liu et al. 2025), group-centred rewards only; 'batch' = the group-centred
    rewards divided by their std over the whole batch (REINFORCE++-baseline, Hu et al. 2025)."""

    token_level: ClassVar[bool] = False
    std: str = "group"
    eps: float = 1e-6
    filter_equal_groups: bool = False

    def __post_init__(self):
        check(self.std in GROUP_STDS, self, "std", f"must be one of {GROUP_STDS}")
        check(self.eps >= 0, self, "eps", "must be >= 0")


@register("grpo", GRPOAdvantageConfig, kind="advantage")
def grpo_advantages(rewards: Array, group_ids: Array, valid: Array,
                    config: GRPOAdvantageConfig) -> tuple[Array, Array]:
    """A_i = (r_i - mean_g) / (std_g + eps) over i's group g (std per `config.std`).
    Returns (advantages [B], row weights [B])."""
    rewards = rewards.astype(jnp.float32)
    same = _same_group(group_ids, valid)
    mean, count = _group_mean_count(rewards, same)
    centred = (rewards - mean) * (valid > 0)
    if config.std == "group":
        # Bessel-corrected; a singleton group has centred = 0 and gets advantage 0
        squares = same * jnp.square(rewards[None, :] - mean[:, None])
        var = jnp.sum(squares, axis=1) / jnp.maximum(count - 1.0, 1.0)
        advantages = centred / (jnp.sqrt(var) + config.eps)
    elif config.std == "batch":
        n = jnp.maximum(jnp.sum(valid > 0), 1)
        batch_mean = jnp.sum(centred) / n
        var = jnp.sum(jnp.square(centred - batch_mean) * (valid > 0)) / jnp.maximum(n - 1, 1)
        advantages = centred / (jnp.sqrt(var) + config.eps)
    else:
        advantages = centred
    weights = _row_weights(rewards, group_ids, valid, config.filter_equal_groups)
    return advantages * weights, weights


@dataclasses.dataclass(frozen=True)
class RLOOAdvantageConfig:
    token_level: ClassVar[bool] = False
    filter_equal_groups: bool = False


@register("rloo", RLOOAdvantageConfig, kind="advantage")
def rloo_advantages(rewards: Array, group_ids: Array, valid: Array,
                    config: RLOOAdvantageConfig) -> tuple[Array, Array]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024):
    A_i = r_i - mean of the other rewards of i's group (0 for a group of one)."""
    rewards = rewards.astype(jnp.float32)
    same = _same_group(group_ids, valid)
    count = jnp.sum(same, axis=1)
    others = (same @ rewards - rewards) / jnp.maximum(count - 1.0, 1.0)
    advantages = jnp.where(count > 1, rewards - others, 0.0) * (valid > 0)
    weights = _row_weights(rewards, group_ids, valid, config.filter_equal_groups)
    return advantages * weights, weights


@dataclasses.dataclass(frozen=True)
class ReinforceAdvantageConfig:
    """baseline: 'batch-mean' subtracts the mean reward of the batch; 'none' is plain REINFORCE."""

    token_level: ClassVar[bool] = False
    baseline: str = "batch-mean"

    def __post_init__(self):
        check(self.baseline in ("batch-mean", "none"), self, "baseline",
              "must be 'batch-mean' or 'none'")


@register("reinforce", ReinforceAdvantageConfig, kind="advantage")
def reinforce_advantages(rewards: Array, group_ids: Array, valid: Array,
                         config: ReinforceAdvantageConfig) -> tuple[Array, Array]:
    """REINFORCE with a baseline (Williams 1992): A_i = r_i - b. Group ids are not used."""
    del group_ids
    rewards = rewards.astype(jnp.float32)
    weights = (valid > 0).astype(jnp.float32)
    baseline = 0.0
    if config.baseline == "batch-mean":
        baseline = jnp.sum(rewards * weights) / jnp.maximum(jnp.sum(weights), 1.0)
    return (rewards - baseline) * weights, weights


@dataclasses.dataclass(frozen=True)
class GAEConfig:
    """gamma: discount; lam: GAE lambda; whiten: normalise advantages over the batch's tokens."""

    token_level: ClassVar[bool] = True
    gamma: float = 1.0
    lam: float = 0.95
    whiten: bool = True
    eps: float = 1e-8

    def __post_init__(self):
        check(0.0 <= self.gamma <= 1.0, self, "gamma", "must be in [0, 1]")
        check(0.0 <= self.lam <= 1.0, self, "lam", "must be in [0, 1]")


@register("gae", GAEConfig, kind="advantage")
def gae_advantages(token_rewards: Array, values: Array, mask: Array,
                   config: GAEConfig) -> tuple[Array, Array]:
    """Generalised advantage estimation (Schulman et al. 2016) over the masked tokens of each row,
    in reverse with `lax.scan`: delta_t = r_t + gamma V_next - V_t, A_t = delta_t + gamma lam
    A_next, where "next" is the next masked token (tool outputs between turns are skipped); the
    value after a row's last token is 0. Returns (advantages, returns = A + V), both [B, T]."""
    mask = mask > 0

    def back(carry, x):
        next_value, next_adv = carry
        r, v, m = x
        adv = r + config.gamma * next_value - v + config.gamma * config.lam * next_adv
        carry = (jnp.where(m, v, next_value), jnp.where(m, adv, next_adv))
        return carry, jnp.where(m, adv, 0.0)

    zeros = jnp.zeros(values.shape[:1], jnp.float32)
    xs = (token_rewards.T.astype(jnp.float32), values.T.astype(jnp.float32), mask.T)
    _, adv = jax.lax.scan(back, (zeros, zeros), xs, reverse=True)
    adv = adv.T
    returns = jnp.where(mask, adv + values, 0.0)
    if config.whiten:
        n = jnp.maximum(jnp.sum(mask), 1)
        mean = jnp.sum(jnp.where(mask, adv, 0.0)) / n
        var = jnp.sum(jnp.where(mask, jnp.square(adv - mean), 0.0)) / jnp.maximum(n - 1, 1)
        adv = jnp.where(mask, (adv - mean) / (jnp.sqrt(var) + config.eps), 0.0)
    return adv, returns


def last_token_rewards(rewards: Array, mask: Array) -> Array:
    """[B, T]: each row's reward on its last masked token, 0 elsewhere (the outcome-reward layout
    GAE consumes)."""
    t = mask.shape[1]
    last = t - 1 - jnp.argmax(mask[:, ::-1] > 0, axis=1)
    on_last = (jnp.arange(t)[None, :] == last[:, None]) & (mask > 0)
    return jnp.where(on_last, rewards[:, None].astype(jnp.float32), 0.0)
