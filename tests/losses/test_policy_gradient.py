"""The clipped policy-gradient loss against a numpy implementation of the published formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses.aggregation import AGGREGATIONS, Denominators
from seetjax.losses.policy_gradient import PolicyGradientConfig, policy_gradient_loss
from seetjax.losses.registry import make_config


def _data(seed=0, b=5, t=8):
    rng = np.random.RandomState(seed)
    old = -rng.rand(b, t).astype(np.float32) * 2
    lp = (old + rng.randn(b, t) * 0.3).astype(np.float32)  # ratios spread over the clip range
    sampler = (old + rng.randn(b, t) * 0.1).astype(np.float32)
    ref = (old + rng.randn(b, t) * 0.2).astype(np.float32)
    ent = rng.rand(b, t).astype(np.float32)
    adv = rng.randn(b).astype(np.float32)
    mask = (rng.rand(b, t) > 0.3).astype(np.float32)
    return lp, old, sampler, ref, ent, adv, mask


def np_aggregate(v, m, mode, c):
    rows = m.sum(1) > 0
    sums = (v * m).sum(1)
    if mode == "token-mean":
        return sums.sum() / m.sum()
    if mode == "seq-mean-token-mean":
        return (sums[rows] / m.sum(1)[rows]).mean()
    if mode == "seq-mean-token-sum":
        return sums[rows].mean()
    return sums[rows].sum() / (rows.sum() * c)


def np_policy_loss(lp, old, sampler, ref, ent, adv, m, cfg):
    lp, old, sampler, ref = (x.astype(np.float64) for x in (lp, old, sampler, ref))
    a = adv[:, None].astype(np.float64)
    if cfg.ratio_level == "sequence":  # GSPO: s_i = exp(mean_t (log pi - log pi_old))
        log_r = np.broadcast_to(((lp - old) * m).sum(1, keepdims=True) / m.sum(1, keepdims=True),
                                lp.shape)
    else:
        log_r = lp - old
    r = np.exp(np.clip(log_r, -cfg.log_ratio_clamp, cfg.log_ratio_clamp))
    lo = 1 - cfg.clip_low if cfg.clip_low is not None else -np.inf
    hi = 1 + cfg.clip_high if cfg.clip_high is not None else np.inf
    loss = np.maximum(-a * r, -a * np.clip(r, lo, hi))
    if cfg.dual_clip:
        loss = np.where(a < 0, np.minimum(loss, -a * cfg.dual_clip), loss)
    if cfg.tis_cap:
        loss = loss * np.minimum(np.exp(old - sampler), cfg.tis_cap)
    total = np_aggregate(loss, m, cfg.aggregation, cfg.norm_constant or 1.0)
    if cfg.kl_coef and not cfg.kl_in_reward:
        k3 = np.exp(ref - lp) - (ref - lp) - 1
        total += cfg.kl_coef * np_aggregate(k3, m, cfg.aggregation, cfg.norm_constant or 1.0)
    if cfg.entropy_coef:
        total -= cfg.entropy_coef * np_aggregate(ent, m, cfg.aggregation, cfg.norm_constant or 1.0)
    return total


CONFIGS = {
    "ppo": PolicyGradientConfig(),
    "dapo-clip-higher": PolicyGradientConfig(clip_low=0.2, clip_high=0.28),
    "dual-clip": PolicyGradientConfig(dual_clip=1.5, clip_low=0.1, clip_high=0.1),
    "kl-entropy": PolicyGradientConfig(kl_coef=0.05, entropy_coef=0.01,
                                       aggregation="seq-mean-token-mean"),
    "tis": PolicyGradientConfig(tis_cap=1.05, aggregation="seq-mean-token-sum"),
    "gspo": PolicyGradientConfig(ratio_level="sequence", clip_low=3e-2, clip_high=4e-2,
                                 aggregation="seq-mean-token-mean"),
    "dr-grpo": PolicyGradientConfig(aggregation="seq-mean-token-sum-norm", norm_constant=16.0),
    "unclipped": PolicyGradientConfig(clip_low=None, clip_high=None, log_ratio_clamp=0.1),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_policy_loss_matches_numpy(name):
    cfg = CONFIGS[name]
    lp, old, sampler, ref, ent, adv, mask = _data()
    loss, metrics = policy_gradient_loss(
        jnp.asarray(lp), jnp.asarray(old), jnp.asarray(adv), jnp.asarray(mask), cfg,
        ref_logprobs=jnp.asarray(ref), entropy=jnp.asarray(ent), sampler_logprobs=jnp.asarray(sampler))
    expected = np_policy_loss(lp, old, sampler, ref, ent, adv, mask, cfg)
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
    assert 0.0 <= float(metrics["clip_fraction"]) <= 1.0


def test_clip_fraction_counts_tokens_whose_gradient_is_cut():
    lp, old, _, _, _, adv, mask = _data(1)
    cfg = PolicyGradientConfig(clip_low=0.1, clip_high=0.2)
    _, metrics = policy_gradient_loss(jnp.asarray(lp), jnp.asarray(old), jnp.asarray(adv),
                                      jnp.asarray(mask), cfg)
    r = np.exp(lp.astype(np.float64) - old)
    a = adv[:, None]
    cut = ((a > 0) & (r > 1.2)) | ((a < 0) & (r < 0.9))
    np.testing.assert_allclose(metrics["clip_fraction"], (cut * mask).sum() / mask.sum(), atol=1e-6)


def test_gspo_gradient_is_the_sequence_ratio_gradient():
    """d/d logpi_t of -A_i s_i / B with s_i = exp(mean_t log r): -A_i s_i / (B |y_i|) (unclipped)."""
    lp, old, _, _, _, adv, mask = _data(2)
    cfg = PolicyGradientConfig(ratio_level="sequence", clip_low=None, clip_high=None,
                               aggregation="seq-mean-token-mean")
    grad = jax.grad(lambda x: policy_gradient_loss(x, jnp.asarray(old), jnp.asarray(adv),
                                                   jnp.asarray(mask), cfg)[0])(jnp.asarray(lp))
    n = mask.sum(1, keepdims=True)
    s = np.exp(((lp - old) * mask).sum(1, keepdims=True) / n)
    expected = -adv[:, None] * s / (n * (n.squeeze(1) > 0).sum()) * mask
    np.testing.assert_allclose(grad, expected, atol=1e-6)


def test_on_policy_gradient_is_reinforce():
    """At ratio 1 the clipped surrogate's gradient is -A grad log pi (token-mean)."""
    lp, _, _, _, _, adv, mask = _data(3)
    grad = jax.grad(lambda x: policy_gradient_loss(
        x, jax.lax.stop_gradient(x), jnp.asarray(adv), jnp.asarray(mask),
        PolicyGradientConfig())[0])(jnp.asarray(lp))
    np.testing.assert_allclose(grad, -adv[:, None] * mask / mask.sum(), atol=1e-6)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_micro_batch_shares_add_up(mode):
    lp, old, _, ref, _, adv, mask = _data(4, b=6)
    cfg = PolicyGradientConfig(aggregation=mode, norm_constant=8.0, kl_coef=0.1)
    args = lambda s: (jnp.asarray(lp[s]), jnp.asarray(old[s]), jnp.asarray(adv[s]),  # noqa: E731
                      jnp.asarray(mask[s]))
    whole, _ = policy_gradient_loss(*args(slice(None)), cfg, ref_logprobs=jnp.asarray(ref))
    d = Denominators.of(jnp.asarray(mask))
    parts = [policy_gradient_loss(*args(slice(i, i + 3)), cfg, ref_logprobs=jnp.asarray(ref[i:i + 3]),
                                  denominators=d)[0] for i in (0, 3)]
    np.testing.assert_allclose(sum(parts), whole, rtol=1e-5)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="norm_constant"):
        PolicyGradientConfig(aggregation="seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match=r"PolicyGradientConfig.dual_clip=0.5"):
        make_config("policy_gradient", {"dual_clip": 0.5})
    with pytest.raises(ValueError, match="PolicyGradientConfig.clip_ratio=0.2: no such field"):
        make_config("policy_gradient", {"clip_ratio": 0.2})
