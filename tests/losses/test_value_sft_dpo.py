"""Value, SFT, DPO and counterfactual losses against numpy implementations of their formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses.aggregation import Denominators
from seetjax.losses.counterfactual import CounterfactualConfig, counterfactual_loss
from seetjax.losses.dpo import DPOConfig, dpo_loss
from seetjax.losses.sft import SFTConfig, sft_loss
from seetjax.losses.value import ValueLossConfig, value_loss


def log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


@pytest.mark.parametrize("clip", [None, 0.2])
def test_value_loss(clip):
    rng = np.random.RandomState(0)
    v, old, ret = (rng.randn(4, 6) for _ in range(3))
    m = (rng.rand(4, 6) > 0.3).astype(np.float32)
    loss, _ = value_loss(*(jnp.asarray(x, jnp.float32) for x in (v, old, ret, m)),
                         ValueLossConfig(clip=clip))
    err = (v - ret) ** 2
    if clip is not None:
        err = np.maximum(err, (old + np.clip(v - old, -clip, clip) - ret) ** 2)
    np.testing.assert_allclose(loss, 0.5 * (err * m).sum() / m.sum(), rtol=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_sft_label_smoothing(eps):
    rng = np.random.RandomState(1)
    logits = rng.randn(3, 5, 7)
    ls = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    y = rng.randint(0, 7, (3, 5))
    m = (rng.rand(3, 5) > 0.3).astype(np.float32)
    target = (1 - eps) * np.eye(7)[y] + eps / 7  # smoothed one-hot
    expected = (-(target * ls).sum(-1) * m).sum() / m.sum()
    lp = np.take_along_axis(ls, y[..., None], -1)[..., 0]
    loss, _ = sft_loss(jnp.asarray(lp, jnp.float32), jnp.asarray(ls.mean(-1), jnp.float32),
                       jnp.asarray(m), SFTConfig(label_smoothing=eps))
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def _pairs(seed=2, p=6):
    rng = np.random.RandomState(seed)
    c, r, rc, rr = (-rng.rand(p) * 10 for _ in range(4))
    w = rng.rand(p)
    w[-1] = 0  # a padding pair
    return c, r, rc, rr, w


@pytest.mark.parametrize("kind,eps", [("sigmoid", 0.0), ("sigmoid", 0.1), ("hinge", 0.0),
                                      ("ipo", 0.0)])
def test_dpo(kind, eps):
    c, r, rc, rr, w = _pairs()
    beta = 0.5
    h = (c - rc) - (r - rr)
    per_pair = {"sigmoid": -(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h),
                "hinge": np.maximum(0, 1 - beta * h),
                "ipo": (h - 1 / (2 * beta)) ** 2}[kind]
    loss, metrics = dpo_loss(*(jnp.asarray(x, jnp.float32) for x in (c, r, rc, rr, w)),
                             DPOConfig(kind=kind, beta=beta, label_smoothing=eps))
    np.testing.assert_allclose(loss, (w * per_pair).sum() / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(metrics["reward_accuracy"], (w * (h > 0)).sum() / w.sum(), rtol=1e-5)


def test_dpo_config_names_the_field():
    with pytest.raises(ValueError, match="label_smoothing"):
        DPOConfig(kind="ipo", label_smoothing=0.1)


@pytest.mark.parametrize("cfg", [CounterfactualConfig(),
                                 CounterfactualConfig(preference_weight=0.5, beta=0.2),
                                 CounterfactualConfig(preference_weight=0.5, reference_free=True)],
                         ids=["ce", "ce+dpo", "ce+ref-free"])
def test_counterfactual(cfg):
    rng = np.random.RandomState(3)
    lp = -rng.rand(4, 6)
    m = (rng.rand(4, 6) > 0.5).astype(np.float32)
    failed, rc, rf = (-rng.rand(4) * 5 for _ in range(3))
    w = np.array([1.0, 0.5, 2.0, 0.0])
    loss, _ = counterfactual_loss(
        jnp.asarray(lp, jnp.float32), jnp.asarray(m), jnp.asarray(w, jnp.float32), cfg,
        failed_logprob_sums=jnp.asarray(failed, jnp.float32), ref_anchor=jnp.asarray(rc, jnp.float32),
        ref_failed=jnp.asarray(rf, jnp.float32))
    expected = (w[:, None] * m * -lp).sum() / (w[:, None] * m).sum()
    if cfg.preference_weight:
        anchor = (lp * m).sum(1)
        h = anchor - failed if cfg.reference_free else (anchor - rc) - (failed - rf)
        expected += cfg.preference_weight * (w * -log_sigmoid(cfg.beta * h)).sum() / w.sum()
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_counterfactual_cross_entropy_raises_anchor_likelihood():
    """The gradient step on the CE part moves every anchor token's logprob up."""
    lp = jnp.asarray([[-2.0, -1.0, -3.0]])
    m = jnp.asarray([[0.0, 1.0, 1.0]])
    g = jax.grad(lambda x: counterfactual_loss(x, m, jnp.ones(1), CounterfactualConfig())[0])(lp)
    assert np.all(np.asarray(g)[m > 0] < 0) and np.asarray(g)[0, 0] == 0


def test_counterfactual_micro_batch_shares_add_up():
    rng = np.random.RandomState(4)
    lp = jnp.asarray(-rng.rand(4, 5), jnp.float32)
    m = jnp.asarray((rng.rand(4, 5) > 0.4), jnp.float32)
    w = jnp.asarray([1.0, 2.0, 0.5, 1.0])
    failed = jnp.asarray(-rng.rand(4) * 3, jnp.float32)
    cfg = CounterfactualConfig(preference_weight=1.0, reference_free=True)
    whole, _ = counterfactual_loss(lp, m, w, cfg, failed_logprob_sums=failed)
    d = Denominators.of(m * w[:, None])
    parts = [counterfactual_loss(lp[s], m[s], w[s], cfg, failed_logprob_sums=failed[s],
                                 denominators=d, total_weight=jnp.sum(w))[0]
             for s in (slice(0, 2), slice(2, 4))]
    np.testing.assert_allclose(sum(parts), whole, rtol=1e-5)
