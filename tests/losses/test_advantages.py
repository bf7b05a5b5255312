"""Advantage estimators against plain numpy / Python implementations of their formulas.

Each estimator is checked twice: on process (step-wise) rewards, several per row, against its
published formula; and on outcome rewards, one per row, bit for bit against the outcome-only
estimators these replaced (`OUTCOME`, below), so a run with an episode reward trains exactly as
before token rewards existed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses import advantages as adv
from seetjax.losses.registry import make_config

T = 7


def _groups():
    rng = np.random.RandomState(0)
    rewards = rng.randn(10).astype(np.float32)
    groups = np.array([7, 7, 7, 3, 3, 3, 3, 9, 5, 5])  # 9: a group of one
    valid = np.ones(10, np.float32)
    valid[9] = 0  # padding row: leaves group 5 with one member
    rewards[[3, 4, 5, 6]] = 1.0  # group 3: all equal
    return rewards, groups, valid


def _many_groups():
    """64 rows in groups of 8 with progress-like rewards (k / 4, k / 3): enough rows that an
    estimator rounding differently from the outcome form would show."""
    rng = np.random.RandomState(6)
    rewards = (rng.randint(0, 5, 64) / np.where(np.arange(64) < 32, 4, 3)).astype(np.float32)
    valid = np.ones(64, np.float32)
    valid[-3:] = 0
    return rewards, np.arange(64) // 8, valid


def _outcome_layout(rewards, valid):
    """One reward per row on a random last position (what the rollout writes), 0 elsewhere."""
    rng = np.random.RandomState(1)
    ends = rng.randint(2, T, size=len(rewards))
    on = (np.arange(T)[None, :] == ends[:, None]).astype(np.float32)
    return np.where(on > 0, rewards[:, None], 0).astype(np.float32), on, ends


def _process_layout():
    """Several rewards per row (some 0.0, which still count), rows with one or none."""
    rng = np.random.RandomState(2)
    groups = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    valid = np.array([1, 1, 1, 1, 1, 1, 1, 0], np.float32)
    mask = np.zeros((8, T), np.float32)
    for row, steps in enumerate([[1, 3, 6], [2, 5], [4], [0, 2, 4, 6], [3], [1, 6], [], [2]]):
        mask[row, steps] = 1
    rewards = np.where(mask > 0, np.round(rng.randn(8, T), 1), 0).astype(np.float32)
    rewards[0, 3] = 0.0  # a marked reward of 0
    return rewards, mask, groups, valid


def _members(groups, valid, i):
    return [j for j in range(len(groups)) if groups[j] == groups[i] and valid[j]]


def np_reward_to_go(r, turn_starts=None):
    """sum_{t' >= t} r_t', or with `turn_starts` only up to the next turn's start."""
    out = np.zeros_like(r, np.float64)
    for b in range(r.shape[0]):
        for t in range(r.shape[1]):
            end = r.shape[1] if turn_starts is None else next(
                (u for u in range(t + 1, r.shape[1]) if turn_starts[b, u]), r.shape[1])
            out[b, t] = sum(r[b, t:end])
    return out


def turn_layout(rows: int, seed: int, length: int = T) -> np.ndarray:
    """[rows, length] f32 turn starts: a few per row, never at 0, the last row without any."""
    rng = np.random.RandomState(seed)
    starts = (rng.rand(rows, length) < 0.25).astype(np.float32)
    starts[:, 0] = 0
    starts[-1] = 0
    return starts


def np_normalised(r, mask, groups, valid, std, eps):
    """Shao et al. 2024, sec. 4.1.3: every step reward normalised by the group's step rewards."""
    r = r.astype(np.float64)
    steps = (mask > 0) & (valid[:, None] > 0)
    out = np.zeros_like(r)
    centred = np.zeros_like(r)
    for i in range(len(groups)):
        pooled = np.concatenate([r[j][steps[j]] for j in _members(groups, valid, i)] or [[]])
        if pooled.size:
            centred[i] = np.where(steps[i], r[i] - pooled.mean(), 0)
    for i in range(len(groups)):
        if std == "group":
            pooled = np.concatenate([r[j][steps[j]] for j in _members(groups, valid, i)] or [[]])
            sd = np.std(pooled, ddof=1) if pooled.size > 1 else 0.0
            out[i] = centred[i] / (sd + eps)
        elif std == "batch":
            out[i] = centred[i] / (np.std(centred[steps], ddof=1) + eps)
        else:
            out[i] = centred[i]
    return out


def test_reward_to_go():
    r = np.random.RandomState(4).randn(3, T).astype(np.float32)
    np.testing.assert_allclose(adv.reward_to_go(jnp.asarray(r)), np_reward_to_go(r), atol=1e-5)
    turns = turn_layout(3, 4)
    np.testing.assert_allclose(adv.reward_to_go(jnp.asarray(r), jnp.asarray(turns)),
                               np_reward_to_go(r, turns), atol=1e-5)
    # by hand: turns start at 2 and 4; each token sees its own turn's rewards only
    r = np.array([[1.0, 2.0, 4.0, 8.0, 16.0, 32.0]], np.float32)
    cut = np.array([[0, 0, 1, 0, 1, 0]], np.float32)
    np.testing.assert_array_equal(adv.reward_to_go(jnp.asarray(r), jnp.asarray(cut)),
                                  [[3.0, 2.0, 12.0, 8.0, 48.0, 32.0]])


def test_last_position_and_outcome_rewards():
    mask = np.array([[0, 1, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0]], np.float32)
    np.testing.assert_array_equal(adv.last_position(jnp.asarray(mask)),
                                  [[0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]])
    rewards, marks = adv.outcome_rewards(jnp.asarray([2.0, 3.0]), jnp.asarray(mask))
    # a row without a trained token keeps its reward (it still counts in its group's statistics)
    np.testing.assert_array_equal(rewards, [[0, 0, 0, 0, 2, 0], [0, 0, 0, 0, 0, 3]])
    np.testing.assert_array_equal(marks, [[0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]])


@pytest.mark.parametrize("std", ["group", "batch", "none"])
def test_group_normalised_rewards_pool_every_step_of_the_group(std):
    r, mask, g, v = _process_layout()
    got = adv.group_normalised_rewards(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g),
                                       jnp.asarray(v), std, 1e-6)
    np.testing.assert_allclose(got, np_normalised(r, mask, g, v, std, 1e-6), atol=1e-5)


@pytest.mark.parametrize("std", ["group", "batch", "none"])
def test_grpo_process_supervision(std):
    """A_t = sum of the normalised step rewards at or after t (DeepSeekMath, sec. 4.1.3)."""
    r, mask, g, v = _process_layout()
    cfg = adv.GRPOAdvantageConfig(std=std)
    got, w = adv.grpo_advantages(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g),
                                 jnp.asarray(v), cfg)
    expected = np_reward_to_go(np_normalised(r, mask, g, v, std, cfg.eps)) * v[:, None]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_array_equal(w, v)
    # horizon 'turn': the same normalised rewards, each summed within its turn
    turns = turn_layout(len(r), 6)
    cfg = adv.GRPOAdvantageConfig(std=std, horizon="turn")
    got, w = adv.grpo_advantages(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g),
                                 jnp.asarray(v), cfg, jnp.asarray(turns))
    expected = np_reward_to_go(np_normalised(r, mask, g, v, std, cfg.eps), turns) * v[:, None]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    with pytest.raises(ValueError, match=r"GRPOAdvantageConfig.horizon='turn' needs "
                                         "TrajectoryBatch.turn_starts"):
        adv.grpo_advantages(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g), jnp.asarray(v), cfg)
    with pytest.raises(ValueError, match=r"GRPOAdvantageConfig.horizon='step': must be one of"):
        adv.GRPOAdvantageConfig(horizon="step")


def test_rloo_reward_to_go_minus_the_others_returns():
    r, mask, g, v = _process_layout()
    got, _ = adv.rloo_advantages(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g),
                                 jnp.asarray(v), adv.RLOOAdvantageConfig())
    returns = r.astype(np.float64).sum(1)
    expected = np.zeros((8, T))
    for i in range(8):
        others = [j for j in _members(g, v, i) if j != i]
        if v[i] and others:
            expected[i] = np_reward_to_go(r[i:i + 1])[0] - returns[others].mean()
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("baseline", ["batch-mean", "none"])
def test_reinforce_reward_to_go_minus_the_batch_mean_return(baseline):
    r, mask, g, v = _process_layout()
    got, _ = adv.reinforce_advantages(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g),
                                      jnp.asarray(v),
                                      adv.ReinforceAdvantageConfig(baseline=baseline))
    b = r.astype(np.float64).sum(1)[v > 0].mean() if baseline == "batch-mean" else 0.0
    np.testing.assert_allclose(got, (np_reward_to_go(r) - b) * v[:, None], atol=1e-5)


def test_filter_equal_groups_pools_steps():
    r, mask, g, v = _process_layout()
    r[3] = np.where(mask[3] > 0, 0.5, 0)  # group 1: every step reward 0.5, over two rows
    r[4] = np.where(mask[4] > 0, 0.5, 0)
    cfg = adv.GRPOAdvantageConfig(filter_equal_groups=True)
    got, w = adv.grpo_advantages(jnp.asarray(r), jnp.asarray(mask), jnp.asarray(g),
                                 jnp.asarray(v), cfg)
    # group 2: row 6 has no step and row 7 is padding, so row 5's steps alone decide (they differ)
    np.testing.assert_array_equal(w, [1, 1, 1, 0, 0, 1, 1, 0])
    assert not np.asarray(got)[3:5].any()


# ---- one reward per row: bit for bit the outcome estimators ------------------------------------

def _same(group_ids, valid):
    v = valid > 0
    return ((group_ids[:, None] == group_ids[None, :]) & v[:, None] & v[None, :]).astype(
        jnp.float32)


def _outcome_weights(rewards, group_ids, valid, filter_equal):
    keep = valid > 0
    if filter_equal:
        same = _same(group_ids, valid) > 0
        high = jnp.max(jnp.where(same, rewards[None, :], -jnp.inf), axis=1)
        low = jnp.min(jnp.where(same, rewards[None, :], jnp.inf), axis=1)
        keep &= ~(high == low)
    return keep.astype(jnp.float32)


def outcome_grpo(rewards, group_ids, valid, cfg):
    same = _same(group_ids, valid)
    count = jnp.sum(same, axis=1)
    mean = same @ rewards / jnp.maximum(count, 1.0)
    centred = (rewards - mean) * (valid > 0)
    if cfg.std == "group":
        squares = same * jnp.square(rewards[None, :] - mean[:, None])
        var = jnp.sum(squares, axis=1) / jnp.maximum(count - 1.0, 1.0)
        a = centred / (jnp.sqrt(var) + cfg.eps)
    elif cfg.std == "batch":
        n = jnp.maximum(jnp.sum(valid > 0), 1)
        batch_mean = jnp.sum(centred) / n
        var = jnp.sum(jnp.square(centred - batch_mean) * (valid > 0)) / jnp.maximum(n - 1, 1)
        a = centred / (jnp.sqrt(var) + cfg.eps)
    else:
        a = centred
    w = _outcome_weights(rewards, group_ids, valid, cfg.filter_equal_groups)
    return a * w, w


def outcome_rloo(rewards, group_ids, valid, cfg):
    same = _same(group_ids, valid)
    count = jnp.sum(same, axis=1)
    others = (same @ rewards - rewards) / jnp.maximum(count - 1.0, 1.0)
    a = jnp.where(count > 1, rewards - others, 0.0) * (valid > 0)
    w = _outcome_weights(rewards, group_ids, valid, cfg.filter_equal_groups)
    return a * w, w


def outcome_reinforce(rewards, group_ids, valid, cfg):
    w = (valid > 0).astype(jnp.float32)
    b = jnp.sum(rewards * w) / jnp.maximum(jnp.sum(w), 1.0) if cfg.baseline == "batch-mean" else 0.0
    return (rewards - b) * w, w


OUTCOME = {"grpo": outcome_grpo, "rloo": outcome_rloo, "reinforce": outcome_reinforce}
CASES = [("grpo", {"std": "group"}), ("grpo", {"std": "batch"}), ("grpo", {"std": "none"}),
         ("grpo", {"filter_equal_groups": True}), ("rloo", {}), ("rloo", {"filter_equal_groups": True}),
         ("reinforce", {}), ("reinforce", {"baseline": "none"})]


@pytest.mark.parametrize("data", [_groups, _many_groups])
@pytest.mark.parametrize("name,fields", CASES)
def test_one_reward_per_row_is_the_outcome_estimator_bit_for_bit(name, fields, data):
    r, g, v = data()
    token_rewards, mask, ends = _outcome_layout(r, v)
    token_rewards, mask, r, g, v = map(jnp.asarray, (token_rewards, mask, r, g, v))
    cfg = make_config(name, fields, kind="advantage")
    fn = getattr(adv, f"{name}_advantages")
    for wrap in (lambda f: f, jax.jit):  # eager and compiled, as in the learner step
        got, w = wrap(lambda *a: fn(*a, cfg))(token_rewards, mask, g, v)
        want, want_w = wrap(lambda *a: OUTCOME[name](*a, cfg))(r, g, v)
        got = np.asarray(got)
        np.testing.assert_array_equal(w, want_w)
        for i, end in enumerate(ends):  # every token up to the reward has the row's advantage
            np.testing.assert_array_equal(got[i, :end + 1], np.full(end + 1, want[i]))


@pytest.mark.parametrize("name,fields", [c for c in CASES if c[1] != {"baseline": "none"}])
def test_equal_rewards_give_exactly_zero_advantages(name, fields):
    """A float mean of n equal rewards can be an ulp off them (7 x 1.4, 3 x 0.9): GRPO's std of
    ~1 ulp would blow that up to advantages of ~0.1, and any residue would read as signal
    (`seetjax.learner.update_signal`). Equal rewards have nothing to learn from: exactly 0."""
    cfg = make_config(name, fields, kind="advantage")
    fn = getattr(adv, f"{name}_advantages")
    for value, n in ((1.4, 7), (0.9, 3), (0.3, 6), (0.7, 7), (0.1, 7)):
        valid = np.ones(n, np.float32)
        token_rewards, mask, ends = _outcome_layout(np.full(n, value, np.float32), valid)
        args = tuple(map(jnp.asarray, (token_rewards, mask, np.zeros(n, np.int32), valid)))
        for wrap in (lambda f: f, jax.jit):
            got, _ = wrap(lambda *a: fn(*a, cfg))(*args)
            # every token up to the reward (the row's trained tokens): after it, the reward to go
            # is 0 and a baseline's -r is what the estimator means
            acting = np.arange(T)[None, :] <= ends[:, None]
            assert float(np.abs(np.asarray(got)[acting]).max()) == 0.0, (value, n)


@pytest.mark.parametrize("std", ["group", "batch", "none"])
def test_grpo_outcome_matches_numpy(std):
    r, g, v = _groups()
    token_rewards, mask, ends = _outcome_layout(r, v)
    cfg = adv.GRPOAdvantageConfig(std=std, eps=1e-6)
    got, w = adv.grpo_advantages(jnp.asarray(token_rewards), jnp.asarray(mask), jnp.asarray(g),
                                 jnp.asarray(v), cfg)
    r64 = r.astype(np.float64)
    centred = np.array([r64[i] - r64[_members(g, v, i)].mean() if v[i] else 0.0
                        for i in range(10)])
    expected = []
    for i in range(10):
        if not v[i]:
            expected.append(0.0)
        elif std == "group":
            m = _members(g, v, i)
            sd = np.std(r64[m], ddof=1) if len(m) > 1 else 0.0
            expected.append(centred[i] / (sd + 1e-6))
        elif std == "batch":
            expected.append(centred[i] / (np.std(centred[v > 0], ddof=1) + 1e-6))
        else:
            expected.append(centred[i])
    np.testing.assert_allclose(np.asarray(got)[np.arange(10), ends], expected, atol=1e-5)
    np.testing.assert_array_equal(w, v)


def test_filter_equal_groups_drops_groups_without_signal():
    r, g, v = _groups()
    token_rewards, mask, _ = _outcome_layout(r, v)
    cfg = adv.GRPOAdvantageConfig(filter_equal_groups=True)
    _, w = adv.grpo_advantages(jnp.asarray(token_rewards), jnp.asarray(mask), jnp.asarray(g),
                               jnp.asarray(v), cfg)
    # group 3 all equal; groups 9 and 5 (after padding) have one member each
    np.testing.assert_array_equal(w, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])


# ---- GAE ---------------------------------------------------------------------------------------

def np_gae(rew, val, mask, gamma, lam):
    """Textbook GAE over the masked positions of each row, in plain Python."""
    out = np.zeros_like(rew, np.float64)
    for b in range(rew.shape[0]):
        idx = [t for t in range(rew.shape[1]) if mask[b, t]]
        next_v, next_a = 0.0, 0.0
        for t in reversed(idx):
            delta = rew[b, t] + gamma * next_v - val[b, t]
            next_a = delta + gamma * lam * next_a
            next_v = val[b, t]
            out[b, t] = next_a
    return out


@pytest.mark.parametrize("whiten", [False, True])
def test_gae(whiten):
    rng = np.random.RandomState(3)
    mask = (rng.rand(3, 9) > 0.3).astype(np.float32)  # gaps: tool outputs between turns
    rew = (rng.randn(3, 9) * mask).astype(np.float32)
    val = rng.randn(3, 9).astype(np.float32)
    cfg = adv.GAEConfig(gamma=0.97, lam=0.9, whiten=whiten)
    a, ret = adv.gae_advantages(jnp.asarray(rew), jnp.asarray(val), jnp.asarray(mask), cfg)
    expected = np_gae(rew, val, mask, 0.97, 0.9)
    np.testing.assert_allclose(ret, np.where(mask > 0, expected + val, 0), atol=1e-5)
    if whiten:
        sel = expected[mask > 0]
        expected = np.where(mask > 0, (expected - sel.mean()) / (sel.std(ddof=1) + 1e-8), 0)
    np.testing.assert_allclose(a, expected, atol=1e-5)


def test_credit_to_trained_moves_each_reward_to_the_trained_token_before_it():
    mask = np.array([[0, 1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0, 0], [0] * 7], np.float32)
    rew = np.random.RandomState(5).randn(3, 7).astype(np.float32)
    expected = np.zeros((3, 7))
    for b in range(3):
        for t in range(7):
            owners = [u for u in range(t + 1) if mask[b, u]]
            if owners:  # before a row's first trained token: dropped
                expected[b, owners[-1]] += rew[b, t]
    got = adv.credit_to_trained(jnp.asarray(rew), jnp.asarray(mask))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # the reward to go of every trained token is unchanged by the move
    np.testing.assert_allclose(np.where(mask > 0, adv.reward_to_go(got), 0),
                               np.where(mask > 0, np_reward_to_go(rew), 0), atol=1e-5)


def test_configs_validate_and_name_fields():
    with pytest.raises(ValueError, match=r"GRPOAdvantageConfig.std='max'"):
        make_config("grpo", {"std": "max"}, kind="advantage")
    with pytest.raises(ValueError, match="GAEConfig.lamda=0.9: no such field"):
        make_config("gae", {"lamda": 0.9}, kind="advantage")
    with pytest.raises(KeyError, match="registered"):
        make_config("vtrace", kind="advantage")
