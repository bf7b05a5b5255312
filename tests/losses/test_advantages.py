"""Advantage estimators against plain numpy / Python implementations of their formulas."""

import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses import advantages as adv
from seetjax.losses.registry import make_config


def _groups():
    rng = np.random.RandomState(0)
    rewards = rng.randn(10).astype(np.float32)
    groups = np.array([7, 7, 7, 3, 3, 3, 3, 9, 5, 5])  # 9: a group of one
    valid = np.ones(10, np.float32)
    valid[9] = 0  # padding row: leaves group 5 with one member
    rewards[[3, 4, 5, 6]] = 1.0  # group 3: all equal
    return rewards, groups, valid


def _members(groups, valid, i):
    return [j for j in range(len(groups)) if groups[j] == groups[i] and valid[j]]


@pytest.mark.parametrize("std", ["group", "batch", "none"])
def test_grpo(std):
    r, g, v = _groups()
    cfg = adv.GRPOAdvantageConfig(std=std, eps=1e-6)
    got, w = adv.grpo_advantages(jnp.asarray(r), jnp.asarray(g), jnp.asarray(v), cfg)
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
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_array_equal(w, v)


def test_filter_equal_groups_drops_groups_without_signal():
    r, g, v = _groups()
    cfg = adv.GRPOAdvantageConfig(filter_equal_groups=True)
    _, w = adv.grpo_advantages(jnp.asarray(r), jnp.asarray(g), jnp.asarray(v), cfg)
    # group 3 all equal; groups 9 and 5 (after padding) have one member each
    np.testing.assert_array_equal(w, [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])


def test_rloo():
    r, g, v = _groups()
    got, _ = adv.rloo_advantages(jnp.asarray(r), jnp.asarray(g), jnp.asarray(v),
                                 adv.RLOOAdvantageConfig())
    expected = []
    for i in range(10):
        others = [j for j in _members(g, v, i) if j != i]
        expected.append(r[i] - np.mean(r[others]) if v[i] and others else 0.0)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("baseline", ["batch-mean", "none"])
def test_reinforce(baseline):
    r, g, v = _groups()
    got, _ = adv.reinforce_advantages(jnp.asarray(r), jnp.asarray(g), jnp.asarray(v),
                                      adv.ReinforceAdvantageConfig(baseline=baseline))
    b = r[v > 0].mean() if baseline == "batch-mean" else 0.0
    np.testing.assert_allclose(got, np.where(v > 0, r - b, 0.0), atol=1e-5)


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


def test_last_token_rewards():
    mask = np.array([[0, 1, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0]], np.float32)
    got = adv.last_token_rewards(jnp.asarray([2.0, 3.0]), jnp.asarray(mask))
    np.testing.assert_array_equal(got, [[0, 0, 0, 0, 2, 0], [0] * 6])


def test_configs_validate_and_name_fields():
    with pytest.raises(ValueError, match=r"GRPOAdvantageConfig.std='max'"):
        make_config("grpo", {"std": "max"}, kind="advantage")
    with pytest.raises(ValueError, match="no field 'lamda'"):
        make_config("gae", {"lamda": 0.9}, kind="advantage")
    with pytest.raises(KeyError, match="registered"):
        make_config("vtrace", kind="advantage")
