"""GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training"): GRPO's
episode-level advantage plus a step-level one, a step's discounted return normalised within the
steps taken from the same environment state (registered as the advantage estimator "gigpo")."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from seetjax.losses.advantages import (
    HORIZONS,
    GRPOAdvantageConfig,
    grpo_advantages,
    horizon_carry,
    horizon_cuts,
    linear_returns,
)
from seetjax.losses.registry import check, register

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class GiGPOAdvantageConfig:
    """GiGPO (Feng et al. 2025): omega, the step advantage's weight (0: this GRPO exactly);
    gamma, the discount of step returns, per reply (the paper's 0.95); std: 'group' divides both
    levels by their group's Bessel-corrected std (the paper's F_norm = std), 'none' only centres
    them (F_norm = 1); horizon: both levels' returns run to the row's end ('episode', the
    paper's) or to the end of the turn ('turn', as `GRPOAdvantageConfig`'s). Needs
    `TrajectoryBatch.step_keys`."""

    needs_values: ClassVar[bool] = False
    needs_step_keys: ClassVar[bool] = True
    omega: float = 1.0
    gamma: float = 0.95
    std: str = "group"
    eps: float = 1e-6
    horizon: str = "episode"

    def __post_init__(self):
        check(self.omega >= 0 and self.omega != float("inf"), self, "omega",
              "must be finite and >= 0")
        check(0.0 <= self.gamma <= 1.0, self, "gamma", "must be in [0, 1]")
        check(self.std in ("group", "none"), self, "std", "must be 'group' or 'none'")
        check(self.eps >= 0, self, "eps", "must be >= 0")
        check(self.horizon in HORIZONS, self, "horizon", f"must be one of {HORIZONS}")


def step_starts(step_keys: Array) -> Array:
    """[B, T] bool: the first token of each step, a run of tokens with one key >= 0 (the
    rollout's replies; two replies always have other tokens between them)."""
    keyed = step_keys >= 0
    earlier = jnp.concatenate([jnp.full_like(step_keys[:, :1], -1), step_keys[:, :-1]], axis=1)
    return keyed & (step_keys != earlier)


def discounted_step_returns(token_rewards: Array, starts: Array, gamma: float,
                            turn_starts: Array | None = None) -> Array:
    """[B, T]: at each step's first token, R_n = sum_{k >= n} gamma^(k - n) r_k, with r_k the
    rewards of step k (a reward belongs to the latest step started at or before its token);
    G_t = r_t + c G_{t+1} elsewhere, c = gamma where token t+1 starts a step, else 1
    (`linear_returns`). With `turn_starts`, k runs to the end of step n's turn only."""
    carry = jnp.concatenate([jnp.where(starts[:, 1:], gamma, 1.0),
                             jnp.zeros_like(token_rewards[:, :1])], axis=1)
    return linear_returns(token_rewards, horizon_carry(carry, turn_starts))


def step_group_normalised(values: Array, starts: Array, step_keys: Array, group_ids: Array,
                          valid: Array, std: str, eps: float) -> Array:
    """[B, T]: at each step's first token of a real row, (v - mean) / (std + eps) over its step
    group, the steps of real rows with its group id and its key (GiGPO's step group, Feng et al.
    2025, eq. 7); 0.0 in a group of one or of equal values, and off the first tokens. Any integer
    keys: the steps are sorted by (group, key) and reduced segment by segment."""
    b, t = values.shape
    off = (~(starts & (valid[:, None] > 0))).reshape(-1).astype(jnp.int32)
    groups = jnp.broadcast_to(group_ids[:, None], (b, t)).reshape(-1)
    off, groups, keys, order = jax.lax.sort(
        (off, groups, step_keys.reshape(-1), jnp.arange(b * t)), num_keys=3)
    on = off == 0
    changed = (off[1:] != off[:-1]) | (groups[1:] != groups[:-1]) | (keys[1:] != keys[:-1])
    segment = jnp.cumsum(jnp.concatenate([jnp.ones(1, bool), changed])) - 1
    v = values.reshape(-1)[order].astype(jnp.float32)

    def per_step(reduce, x):
        return reduce(x, segment, num_segments=b * t)[segment]

    count = per_step(jax.ops.segment_sum, on.astype(jnp.float32))
    # equal values (a group of one among them) are centred to exactly 0, not to a float mean
    # an ulp off them, so "no signal" stays exact (`seetjax.learner.update_signal`)
    differ = (per_step(jax.ops.segment_max, jnp.where(on, v, -jnp.inf))
              > per_step(jax.ops.segment_min, jnp.where(on, v, jnp.inf)))
    mean = per_step(jax.ops.segment_sum, jnp.where(on, v, 0.0)) / jnp.maximum(count, 1.0)
    centred = jnp.where(on & differ, v - mean, 0.0)
    if std == "group":
        var = per_step(jax.ops.segment_sum, jnp.square(centred)) / jnp.maximum(count - 1.0, 1.0)
        centred = jnp.where(on & differ, centred / (jnp.sqrt(var) + eps), 0.0)
    return jnp.zeros(b * t, jnp.float32).at[order].set(centred).reshape(b, t)


@register("gigpo", GiGPOAdvantageConfig, kind="advantage")
def gigpo_advantages(token_rewards: Array, reward_mask: Array, group_ids: Array, valid: Array,
                     config: GiGPOAdvantageConfig, step_keys: Array,
                     turn_starts: Array | None = None) -> tuple[Array, Array]:
    """GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
    eq. 8): A = A^E + omega A^S. A^E is the episode-level advantage, this module's `grpo` with
    the same std and eps (with one reward per row: (R_i - mean_g) / F_norm); A^S is the
    step-level one: a step's discounted return (`discounted_step_returns`) normalised within its
    step group, the steps of the group's rows taken from the same environment state
    (`step_keys`: [B, T] int32, the state's key on every token of a step, < 0 off the steps;
    `step_group_normalised`), on every token of the step; with horizon 'turn' both returns end
    with the turn. Returns (advantages [B, T], row weights [B])."""
    token_rewards = jnp.where(reward_mask > 0, token_rewards.astype(jnp.float32), 0.0)
    cuts = horizon_cuts(config, turn_starts)
    episode, weights = grpo_advantages(
        token_rewards, reward_mask, group_ids, valid,
        GRPOAdvantageConfig(std=config.std, eps=config.eps, horizon=config.horizon), cuts)
    starts = step_starts(step_keys)
    first = step_group_normalised(discounted_step_returns(token_rewards, starts, config.gamma,
                                                          cuts),
                                  starts, step_keys, group_ids, valid, config.std, config.eps)
    t = step_keys.shape[1]
    owner = jax.lax.cummax(jnp.where(starts, jnp.arange(t), 0), axis=1)
    step = jnp.where(step_keys >= 0, jnp.take_along_axis(first, owner, axis=1), 0.0)
    return (episode + config.omega * step) * weights[:, None], weights
