"""GiGPO's advantages (Feng et al. 2025) against a hand-computed case and a numpy loop over the
published formula: A = A^E + omega A^S, A^S a step's discounted return normalised within the
steps of its group taken from the same state (a step group of one: 0)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses import advantages as adv
from seetjax.losses import gigpo
from seetjax.losses.registry import make_config
from tests.losses.test_advantages import _process_layout, np_normalised, np_reward_to_go, turn_layout

T = 12
# per row: its replies as (start, end, state key); rewards go on each reply's last token
REPLIES = [[(1, 3, 10), (4, 6, 11), (7, 9, 12)],
           [(1, 3, 10), (4, 6, 13), (7, 9, 12)],
           [(1, 4, 10), (5, 7, 11)],
           [(1, 3, 10), (4, 6, 11)],  # group 1: key 10 again, another group's state
           [(1, 3, 10), (4, 6, 11)],
           [(1, 3, 10)],  # group 2: one row
           [(1, 3, 10), (4, 6, 11)]]  # padding row in group 0
GROUPS = np.array([0, 0, 0, 1, 1, 2, 0])
VALID = np.array([1, 1, 1, 1, 1, 1, 0], np.float32)


def _layout(outcome: bool):
    rng = np.random.RandomState(3)
    keys = np.full((len(REPLIES), T), -1, np.int32)
    mask = np.zeros((len(REPLIES), T), np.float32)
    for row, replies in enumerate(REPLIES):
        for start, end, key in replies:
            keys[row, start:end] = key
            if not outcome or end == replies[-1][1]:
                mask[row, end - 1] = 1
    rewards = np.where(mask > 0, np.round(rng.randn(*mask.shape), 1), 0).astype(np.float32)
    rewards[1, 5] = 0.0  # a marked reward of 0
    return rewards, mask, keys


def np_gigpo(rewards, mask, groups, valid, keys, omega, gamma, std, eps, turn_starts=None):
    """The formula, step by step: steps are runs of one key >= 0; a reward belongs to the
    latest step started at or before it; R_n = sum_k gamma^(k-n) r_k; step groups are the
    steps of real rows with equal group and key. With `turn_starts` (horizon 'turn') every
    return stops at the next turn's start: a step's owns no reward after it, and k runs over
    the steps of n's turn only."""
    episode = np_reward_to_go(np_normalised(rewards, mask, groups, valid, std, eps), turn_starts)
    cuts = np.zeros(keys.shape) if turn_starts is None else turn_starts
    turn = np.cumsum(cuts, axis=1)
    steps, returns = [], {}
    for row in range(len(keys)):
        starts = [t for t in range(T) if keys[row, t] >= 0
                  and (t == 0 or keys[row, t - 1] != keys[row, t])]
        ends = [next((u for u in range(s, T) if keys[row, u] != keys[row, s]), T) for s in starts]
        owned = [sum(rewards[row, t] for t in range(s, n) if mask[row, t]
                     and turn[row, t] == turn[row, s])
                 for s, n in zip(starts, starts[1:] + [T])]
        for n, (s, e) in enumerate(zip(starts, ends)):
            step = (row, s, e, keys[row, s])
            steps.append(step)
            returns[step] = sum(gamma ** (k - n) * owned[k] for k in range(n, len(owned))
                                if turn[row, starts[k]] == turn[row, s])
    step_adv = np.zeros(keys.shape)
    for step in steps:
        row, s, e, key = step
        peers = [returns[o] for o in steps if valid[o[0]] and groups[o[0]] == groups[row]
                 and o[3] == key]
        if not valid[row] or len(set(peers)) < 2:
            continue
        a = returns[step] - np.mean(peers)
        step_adv[row, s:e] = a / (np.std(peers, ddof=1) + eps) if std == "group" else a
    return (episode + omega * step_adv) * valid[:, None]


_GIGPO = jax.jit(gigpo.gigpo_advantages, static_argnames="config")  # as the learner runs it


def run(rewards, mask, groups, valid, keys, turn_starts=None, **fields):
    cfg = make_config("gigpo", fields, kind="advantage")
    return _GIGPO(*(jnp.asarray(x) for x in (rewards, mask, groups, valid)), config=cfg,
                  step_keys=jnp.asarray(keys),
                  turn_starts=None if turn_starts is None else jnp.asarray(turn_starts))


def test_hand_computed_two_episodes_one_shared_state():
    # two episodes of one task, each of two replies; the first replies share the initial state,
    # the second ones do not; episode rewards 1 and 0 on the last reply's last token
    keys = np.array([[-1, 0, 0, -1, 1, 1, -1, -1], [-1, 0, 0, -1, 2, 2, -1, -1]], np.int32)
    mask = np.zeros((2, 8), np.float32)
    mask[:, 5] = 1
    rewards = mask * np.array([[1.0], [0.0]], np.float32)
    groups, valid = np.zeros(2, np.int32), np.ones(2, np.float32)
    got, w = run(rewards, mask, groups, valid, keys, omega=1.0, gamma=0.5, std="none")
    # A^E = R - mean = +-0.5 up to the reward's token; the first step's returns are
    # 0.5 * 1 and 0.5 * 0: A^S = +-0.25 on its tokens; the second steps are groups of one
    a = np.array([0.5, 0.75, 0.75, 0.5, 0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(got, [a, -a], atol=1e-7)
    np.testing.assert_array_equal(w, valid)
    # F_norm = std: both levels become +-1/sqrt(2) where they were +-0.5 and +-0.25
    got, _ = run(rewards, mask, groups, valid, keys, omega=1.0, gamma=0.5, std="group")
    h = 2 ** -0.5
    a = np.array([h, 2 * h, 2 * h, h, h, h, 0.0, 0.0])
    np.testing.assert_allclose(got, [a, -a], atol=1e-5)


@pytest.mark.parametrize("outcome,std,gamma", [(False, "group", 0.9), (True, "none", 0.9),
                                               (False, "none", 1.0), (True, "group", 1.0)])
@pytest.mark.parametrize("horizon", ["episode", "turn"])
def test_matches_the_formula(outcome, std, gamma, horizon):
    """Rewards per reply (shaped) or one per episode, on the last reply; returns to the row's
    end or to the turn's."""
    rewards, mask, keys = _layout(outcome)
    turns = turn_layout(len(keys), 7, T) if horizon == "turn" else None
    got, w = run(rewards, mask, GROUPS, VALID, keys, turns, omega=0.7, gamma=gamma, std=std,
                 horizon=horizon)
    expected = np_gigpo(rewards, mask, GROUPS, VALID, keys, 0.7, gamma, std, 1e-6, turns)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_array_equal(w, VALID)


def test_a_turn_horizon_compares_a_branch_cut_at_its_turn_with_its_siblings_turn():
    """Row 0 plays turn 0 (replies from states 0 and 1) and turn 1 (state 2): rewards 0.0 on
    turn 0's end, 1.0 on turn 1's. Row 1 is a branch from state 1 that stops at turn 0's end,
    reward 1.0 there; its first reply, row 0's context, is masked (key -1). Gamma 1, no std.
    To the episode's end, state 1's step group compares 1.0 (row 0: turn 1's reward) with 1.0:
    no step signal, though the branch did better on the turn; to the turn's end, 0.0 with 1.0:
    A^S = -0.5 and +0.5."""
    keys = np.array([[-1, 0, 0, -1, 1, 1, -1, 2, 2, -1],
                     [-1, -1, -1, -1, 1, 1, -1, -1, -1, -1]], np.int32)
    mask = np.zeros((2, 10), np.float32)
    mask[0, [5, 8]] = mask[1, 5] = 1
    rewards = mask * np.array([[0, 0, 0, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1, 0, 0, 0, 0]],
                              np.float32)
    cuts = np.zeros((2, 10), np.float32)
    cuts[0, 6] = 1  # turn 1's request begins after turn 0's last reply
    groups, valid = np.zeros(2, np.int32), np.ones(2, np.float32)

    def step_level(horizon, turns):
        full, _ = run(rewards, mask, groups, valid, keys, turns, omega=1.0, gamma=1.0,
                      std="none", horizon=horizon)
        alone, _ = run(rewards, mask, groups, valid, keys, turns, omega=0.0, gamma=1.0,
                       std="none", horizon=horizon)
        return np.asarray(full) - np.asarray(alone)

    assert np.all(step_level("episode", None) == 0)
    step = step_level("turn", cuts)
    np.testing.assert_allclose(step[:, 4:6], [[-0.5, -0.5], [0.5, 0.5]], atol=1e-7)
    assert np.all(step[:, :4] == 0) and np.all(step[:, 6:] == 0)  # groups of one elsewhere
    # the episode level with the turn's horizon: rewards 0, 1 and 1 centred on 2/3 pooled,
    # each summed within its turn
    alone = np.asarray(run(rewards, mask, groups, valid, keys, cuts, omega=0.0, gamma=1.0,
                           std="none", horizon="turn")[0])
    np.testing.assert_allclose(alone[0, :6], -2 / 3, atol=1e-6)
    np.testing.assert_allclose(alone[0, 6:9], 1 / 3, atol=1e-6)
    np.testing.assert_allclose(alone[1, :6], 1 / 3, atol=1e-6)


def test_step_groups_are_within_a_group_and_count_real_rows_only():
    rewards, mask, keys = _layout(False)
    rewards[4] = rewards[3]  # group 1's two rows: the same states, the same rewards
    step = lambda *a: np.asarray(run(*a, omega=1.0)[0]) - np.asarray(  # noqa: E731
        run(*a, omega=0.0)[0])
    base = step(rewards, mask, GROUPS, VALID, keys)
    # group 1's equal returns are not pooled with group 0's steps of the same keys
    assert np.all(base[3:5] == 0) and np.all(base[0, 1:3] != 0)
    assert np.all(base[5] == 0)  # a group of one row: every step group is of one
    assert np.all(base[0, 4:6] != 0) and np.all(base[1, 4:6] == 0)  # key 13: alone
    # the padding row's steps share keys with group 0's: dropping the row changes nothing
    np.testing.assert_array_equal(base[:6], step(rewards[:6], mask[:6], GROUPS[:6], VALID[:6],
                                                 keys[:6]))
    # keys are any integers: a relabelling (huge, negative-free) gives the same advantages
    relabel = {10: 2_000_000_000, 11: 7, 12: 123_456, 13: 0}
    renamed = np.vectorize(lambda k: relabel.get(k, k))(keys).astype(np.int32)
    np.testing.assert_array_equal(base, step(rewards, mask, GROUPS, VALID, renamed))


@pytest.mark.parametrize("std", ["group", "none"])
@pytest.mark.parametrize("layout", ["process", "outcome"])
def test_omega_zero_is_grpo_bit_for_bit(std, layout):
    if layout == "process":
        rewards, mask, groups, valid = _process_layout()
    else:
        rewards, mask, _ = _layout(True)
        groups, valid = GROUPS, VALID
    keys = np.random.RandomState(5).randint(-1, 3, rewards.shape).astype(np.int32)
    got, w = run(rewards, mask, groups, valid, keys, omega=0.0, std=std)
    cfg = adv.GRPOAdvantageConfig(std=std)
    want, want_w = jax.jit(lambda *a: adv.grpo_advantages(*a, cfg))(
        *(jnp.asarray(x) for x in (rewards, mask, groups, valid)))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(w, want_w)


def test_equal_returns_give_exactly_zero_step_advantages():
    # every step of a group from one state with one return (7 x 1.4: a float mean is off)
    rewards = np.zeros((7, 4), np.float32)
    rewards[:, 2] = 1.4
    mask = (rewards != 0).astype(np.float32)
    keys = np.tile(np.array([-1, 5, 5, -1], np.int32), (7, 1))
    got, _ = run(rewards, mask, np.zeros(7, np.int32), np.ones(7, np.float32), keys)
    assert np.all(np.asarray(got) == 0)


def test_config_validates_and_names_the_field():
    for field, value in (("omega", -1.0), ("gamma", 1.5), ("std", "batch"), ("eps", -1.0),
                         ("horizon", "step")):
        with pytest.raises(ValueError, match=rf"GiGPOAdvantageConfig\.{field}="):
            make_config("gigpo", {field: value}, kind="advantage")
    cfg = make_config("gigpo", kind="advantage")
    assert (cfg.omega, cfg.gamma, cfg.std, cfg.horizon) == (1.0, 0.95, "group", "episode")
    assert cfg.needs_step_keys and not cfg.needs_values
