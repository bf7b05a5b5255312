"""Advantage estimators, registered by name (kind "advantage"), over token-level rewards.

Rewards arrive as a [B, T] array, each on the token it scores (the last generated token of the
reply it rewards; an episode reward on the row's last one), with a [B, T] `reward_mask` marking
those tokens (a reward may be 0.0). One reward per row is the outcome-reward case; a row with
several (step-wise shaping) is the process-reward case, and every estimator here reduces exactly,
bit for bit, to its outcome form when each row has a single reward at or after its last trained
token (`outcome_rewards` builds that layout from [B] rewards).

`grpo`, `rloo` and `reinforce` (and `gigpo`, `seetjax.losses.gigpo`) map (token rewards, reward
mask, group ids, valid rows) to advantages [B, T] and per-row weights [B] (0.0 for padding rows
and for rows dropped by `filter_equal_groups`); `gae` maps token rewards and values [B, T] to
advantages and returns.
Each is built from small pure functions (`reward_to_go`, `group_normalised_rewards`, ...) with
their own tests. Groups are given by arbitrary integer ids; group statistics use a [B, B]
same-group matrix, exact for any ids and cheap for rollout batch sizes. Statistics are reduced
over tokens first (exact with one reward per row), then over rows as in the outcome forms.
Rewards that are all equal where a baseline averages them give advantages of exactly 0 (a float
mean of equal values can be an ulp off them), so "no advantage anywhere" is a test the trainer
can make (`seetjax.learner.update_signal`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from seetjax.losses.registry import check, register

Array = jax.Array

GROUP_STDS = ("group", "batch", "none")
HORIZONS = ("episode", "turn")  # how far a return runs: to the row's end, or to its turn's end


def _same_group(group_ids: Array, valid: Array) -> Array:
    """[B, B] f32: 1 where rows i and j are both real and in the same group."""
    v = valid > 0
    return ((group_ids[:, None] == group_ids[None, :]) & v[:, None] & v[None, :]).astype(
        jnp.float32)


def reward_to_go(token_rewards: Array, turn_starts: Array | None = None) -> Array:
    """G_t = sum_{t' >= t} r_t' along each row, [B, T] -> [B, T]: the (undiscounted) return from
    token t on, REINFORCE's "reward to go" (Williams 1992; Sutton & Barto 2018, sec. 13.3). With
    `turn_starts` ([B, T], > 0 where a turn begins: a horizon of "turn"), the sum stops before the
    next turn's start: the return from t to the end of its own turn."""
    if turn_starts is None:
        return jnp.cumsum(token_rewards[:, ::-1], axis=1)[:, ::-1]
    return linear_returns(token_rewards, horizon_carry(jnp.ones_like(token_rewards), turn_starts))


def horizon_carry(carry: Array, turn_starts: Array | None) -> Array:
    """`carry` ([B, T]: the factor on G_{t+1} in G_t) with 0 wherever token t+1 starts a turn,
    so no return runs back across a turn's start (None: unchanged)."""
    if turn_starts is None:
        return carry
    cut = jnp.concatenate([turn_starts[:, 1:] > 0, jnp.zeros_like(turn_starts[:, :1], bool)],
                          axis=1)
    return jnp.where(cut, 0.0, carry)


def linear_returns(token_rewards: Array, carry: Array) -> Array:
    """G_t = r_t + carry_t G_{t+1} along each row ([B, T]; carry's last column is never read:
    there is no G_T): a linear recurrence, run as an associative scan (log T deep)."""
    def compose(later, earlier):  # (A, B): y -> B + A y, the earlier map applied after
        return earlier[0] * later[0], earlier[1] + earlier[0] * later[1]

    return jax.lax.associative_scan(compose, (carry, token_rewards.astype(jnp.float32)),
                                    reverse=True, axis=1)[1]


def last_position(mask: Array) -> Array:
    """[B, T] f32: 1.0 on each row's last position where `mask` > 0 (a row without one: on its
    last position), 0.0 elsewhere."""
    t = mask.shape[1]
    last = t - 1 - jnp.argmax(mask[:, ::-1] > 0, axis=1)
    return (jnp.arange(t)[None, :] == last[:, None]).astype(jnp.float32)


def outcome_rewards(rewards: Array, mask: Array) -> tuple[Array, Array]:
    """The token-reward layout of one reward per row, [B] -> ([B, T] rewards, [B, T] reward
    mask): each row's reward on its last loss-mask token (`last_position`)."""
    on_last = last_position(mask)
    return jnp.where(on_last > 0, rewards[:, None].astype(jnp.float32), 0.0), on_last


def group_normalised_rewards(token_rewards: Array, reward_mask: Array, group_ids: Array,
                             valid: Array, std: str, eps: float) -> Array:
    """Process supervision's normalisation (Shao et al. 2024, DeepSeekMath, sec. 4.1.3): every
    reward r of a group's rows becomes r~ = (r - mean(R)) / (std(R) + eps), with R all the rewards
    of the group's rows (every marked token of every row), [B, T] -> [B, T], 0.0 off the marked
    tokens. std: "group" = Bessel-corrected std of R; "batch" = std of the centred rewards of the
    whole batch (REINFORCE++-baseline, Hu et al. 2025); "none" = centred only (Dr. GRPO, Liu et
    al. 2025). With one reward per row: GRPO's outcome normalisation of the rows' rewards."""
    steps = reward_mask * (valid[:, None] > 0)
    same = _same_group(group_ids, valid)
    count = jnp.sum(same * jnp.sum(steps, axis=1)[None, :], axis=1)
    mean = same @ jnp.sum(token_rewards * steps, axis=1) / jnp.maximum(count, 1.0)
    # A float mean of equal rewards can be an ulp off them (7 x 1.4), which a std of ~1 ulp
    # would blow up to ~0.1: a group with nothing to learn from is centred to exactly 0.
    equal = equal_reward_groups(token_rewards, reward_mask, group_ids, valid)
    centred = jnp.where(equal[:, None], 0.0, (token_rewards - mean[:, None]) * steps)
    if std == "group":
        # Bessel-corrected; a group with a single reward has centred = 0 and gets 0
        squares = jnp.sum(jnp.square(centred), axis=1)
        var = jnp.sum(same * squares[None, :], axis=1) / jnp.maximum(count - 1.0, 1.0)
        # A true division, as the outcome form's [B] / [B]: XLA turns a division by a broadcast
        # into a multiplication by its reciprocal (1 ulp off), which the barrier prevents.
        denominator = jax.lax.optimization_barrier(
            jnp.broadcast_to((jnp.sqrt(var) + eps)[:, None], centred.shape))
        return centred / denominator
    if std == "batch":
        n = jnp.maximum(jnp.sum(jnp.sum(steps, axis=1)), 1)
        batch_mean = jnp.sum(jnp.sum(centred, axis=1)) / n
        var = jnp.sum(jnp.sum(jnp.square(centred - batch_mean) * steps, axis=1)) / jnp.maximum(
            n - 1, 1)
        return centred / (jnp.sqrt(var) + eps)
    return centred


def equal_reward_groups(token_rewards: Array, reward_mask: Array, group_ids: Array,
                        valid: Array) -> Array:
    """[B] bool: rows whose group's rewards (all marked tokens of all its rows) are all equal:
    GRPO's advantages are then 0 (no learning signal: DAPO's dynamic sampling, Yu et al. 2025,
    drops them)."""
    steps = (reward_mask > 0) & (valid[:, None] > 0)
    row_high = jnp.max(jnp.where(steps, token_rewards, -jnp.inf), axis=1)
    row_low = jnp.min(jnp.where(steps, token_rewards, jnp.inf), axis=1)
    same = _same_group(group_ids, valid) > 0
    high = jnp.max(jnp.where(same, row_high[None, :], -jnp.inf), axis=1)
    low = jnp.min(jnp.where(same, row_low[None, :], jnp.inf), axis=1)
    return high <= low


def _equal_returns(returns: Array, group_ids: Array, valid: Array) -> Array:
    """[B] bool: rows whose group's returns [B] are all equal (`equal_reward_groups` of one
    reward per row): a baseline that averages them is then exactly that return, not its float
    mean, which can be an ulp off."""
    return equal_reward_groups(returns[:, None], jnp.ones_like(returns)[:, None], group_ids,
                               valid)


def _row_weights(token_rewards: Array, reward_mask: Array, group_ids: Array, valid: Array,
                 filter_equal: bool) -> Array:
    keep = valid > 0
    if filter_equal:
        keep &= ~equal_reward_groups(token_rewards, reward_mask, group_ids, valid)
    return keep.astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class GRPOAdvantageConfig:
    """std: 'group' = GRPO (Shao et al. 2024, DeepSeekMath), Bessel-corrected group std;
    'none' = Dr. GRPO (Liu et al. 2025), group-centred rewards only; 'batch' = the group-centred
    rewards divided by their std over the whole batch (REINFORCE++-baseline, Hu et al. 2025).
    horizon: how far a token's advantage sums the normalised rewards after it, to its row's end
    ('episode', the paper's) or to its turn's end ('turn': needs `TrajectoryBatch.turn_starts`;
    turn-level credit, and what a branch played to its fork turn's end only can be compared by).
    `needs_values`: whether the estimator reads a critic's values (only GAE does)."""

    needs_values: ClassVar[bool] = False
    std: str = "group"
    eps: float = 1e-6
    filter_equal_groups: bool = False
    horizon: str = "episode"

    def __post_init__(self):
        check(self.std in GROUP_STDS, self, "std", f"must be one of {GROUP_STDS}")
        check(self.eps >= 0, self, "eps", "must be >= 0")
        check(self.horizon in HORIZONS, self, "horizon", f"must be one of {HORIZONS}")


@register("grpo", GRPOAdvantageConfig, kind="advantage")
def grpo_advantages(token_rewards: Array, reward_mask: Array, group_ids: Array, valid: Array,
                    config: GRPOAdvantageConfig, turn_starts: Array | None = None
                    ) -> tuple[Array, Array]:
    """GRPO with process supervision (Shao et al. 2024, sec. 4.1.3): the advantage of a token is
    the sum of the normalised rewards (`group_normalised_rewards`) on it and after it in its row,
    A_t = sum_{t' >= t} r~_t' (with horizon 'turn', t' within t's turn: `turn_starts`). With one
    reward per row at its end this is outcome supervision (sec. 4.1.2),
    A_i = (r_i - mean_g) / (std_g + eps) on every token.
    Returns (advantages [B, T], row weights [B])."""
    token_rewards = token_rewards.astype(jnp.float32)
    normalised = group_normalised_rewards(token_rewards, reward_mask, group_ids, valid,
                                          config.std, config.eps)
    weights = _row_weights(token_rewards, reward_mask, group_ids, valid,
                           config.filter_equal_groups)
    return reward_to_go(normalised, horizon_cuts(config, turn_starts)) * weights[:, None], weights


def estimator_inputs(config, step_keys: Array | None, turn_starts: Array | None
                     ) -> dict[str, Array | None]:
    """The batch arrays an estimator's `config` asks for beyond the common ones, as keyword
    arguments: GiGPO's `step_keys`, and `turn_starts` for a horizon of 'turn'."""
    inputs = {"step_keys": step_keys} if getattr(config, "needs_step_keys", False) else {}
    if getattr(config, "horizon", "episode") == "turn":
        inputs["turn_starts"] = turn_starts
    return inputs


def horizon_cuts(config, turn_starts: Array | None) -> Array | None:
    """`turn_starts` where `config.horizon` is 'turn' (failing if absent), else None."""
    if config.horizon != "turn":
        return None
    if turn_starts is None:
        raise ValueError(f"{type(config).__name__}.horizon='turn' needs "
                         "TrajectoryBatch.turn_starts")
    return turn_starts


@dataclasses.dataclass(frozen=True)
class RLOOAdvantageConfig:
    needs_values: ClassVar[bool] = False
    filter_equal_groups: bool = False


@register("rloo", RLOOAdvantageConfig, kind="advantage")
def rloo_advantages(token_rewards: Array, reward_mask: Array, group_ids: Array, valid: Array,
                    config: RLOOAdvantageConfig) -> tuple[Array, Array]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024) on the reward to go:
    A_{i,t} = G_{i,t} - mean_{j in g, j != i} R_j, with G_{i,t} row i's return from token t on
    (`reward_to_go`) and R_j = G_{j,0} row j's whole return (0 for a group of one). The baseline
    does not depend on row i's actions, so the estimate stays unbiased. With one reward per row:
    A_i = r_i - mean of the other rewards of i's group."""
    token_rewards = token_rewards.astype(jnp.float32)
    same = _same_group(group_ids, valid)
    count = jnp.sum(same, axis=1)
    returns = jnp.sum(token_rewards, axis=1)
    others = jnp.where(_equal_returns(returns, group_ids, valid), returns,
                       (same @ returns - returns) / jnp.maximum(count - 1.0, 1.0))
    advantages = jnp.where(count[:, None] > 1, reward_to_go(token_rewards) - others[:, None],
                           0.0) * (valid[:, None] > 0)
    weights = _row_weights(token_rewards, reward_mask, group_ids, valid,
                           config.filter_equal_groups)
    return advantages * weights[:, None], weights


@dataclasses.dataclass(frozen=True)
class ReinforceAdvantageConfig:
    """baseline: 'batch-mean' subtracts the mean return of the batch; 'none' is plain REINFORCE."""

    needs_values: ClassVar[bool] = False
    baseline: str = "batch-mean"

    def __post_init__(self):
        check(self.baseline in ("batch-mean", "none"), self, "baseline",
              "must be 'batch-mean' or 'none'")


@register("reinforce", ReinforceAdvantageConfig, kind="advantage")
def reinforce_advantages(token_rewards: Array, reward_mask: Array, group_ids: Array,
                         valid: Array, config: ReinforceAdvantageConfig) -> tuple[Array, Array]:
    """REINFORCE with a baseline (Williams 1992) on the reward to go: A_{i,t} = G_{i,t} - b, with
    b the mean whole return R_j = G_{j,0} over the batch's rows (or 0). With one reward per row:
    A_i = r_i - b. Group ids and the reward mask are not used (the batch is one group)."""
    del reward_mask
    token_rewards = token_rewards.astype(jnp.float32)
    weights = (valid > 0).astype(jnp.float32)
    baseline = jnp.zeros_like(weights)
    if config.baseline == "batch-mean":
        returns = jnp.sum(token_rewards, axis=1)
        mean = jnp.sum(returns * weights) / jnp.maximum(jnp.sum(weights), 1.0)
        baseline = jnp.where(_equal_returns(returns, jnp.zeros_like(group_ids), valid), returns,
                             mean)
    return (reward_to_go(token_rewards) - baseline[:, None]) * weights[:, None], weights


@dataclasses.dataclass(frozen=True)
class GAEConfig:
    """gamma: discount; lam: GAE lambda; whiten: normalise advantages over the batch's tokens."""

    needs_values: ClassVar[bool] = True
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
    value after a row's last token is 0. Rewards on unmasked tokens are not seen: move them onto
    the masked tokens first (`credit_to_trained`). Returns (advantages, returns = A + V), both
    [B, T]."""
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


def credit_to_trained(token_rewards: Array, mask: Array) -> Array:
    """Each reward moved onto the latest masked token at or before it, [B, T] -> [B, T] (rewards
    before a row's first masked token reach no action and are dropped). A reward on a token the
    learner does not train (a reply kept without loss, the environment's text, padding) is a
    consequence of the last action taken before it; GAE, which steps from masked token to masked
    token, then sees it there. Undiscounted: untrained tokens are not time steps of the policy."""
    t = mask.shape[1]
    owner = jax.lax.cummax(jnp.where(mask > 0, jnp.arange(t), -1), axis=1)
    return jax.vmap(lambda r, o: jax.ops.segment_sum(r, o, num_segments=t))(
        token_rewards.astype(jnp.float32), owner)
