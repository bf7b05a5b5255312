"""Next-token choice: greedy, temperature, top-k, top-p, and the logprob it reports."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.sampling import SamplingParams, sample_next_token
from seetjax.sampling.next_token import inverse_cdf_sample

LOGITS = jnp.asarray(np.random.RandomState(0).randn(4, 12).astype(np.float32) * 2)


def draw(params, n=4000, logits=LOGITS):
    keys = jax.random.split(jax.random.key(0), n)
    return jax.jit(jax.vmap(lambda k: sample_next_token(logits, k, params)))(keys)


def test_greedy_is_argmax_with_its_logprob():
    tokens, logprobs = sample_next_token(LOGITS, jax.random.key(0), SamplingParams(temperature=0))
    np.testing.assert_array_equal(tokens, np.argmax(LOGITS, -1))
    expected = jax.nn.log_softmax(LOGITS)[np.arange(4), np.argmax(LOGITS, -1)]
    np.testing.assert_allclose(logprobs, expected, rtol=1e-6)


def test_temperature_one_matches_the_softmax():
    tokens, logprobs = draw(SamplingParams(temperature=1.0))
    probs = np.asarray(jax.nn.softmax(LOGITS))
    for row in range(4):
        freq = np.bincount(np.asarray(tokens[:, row]), minlength=12) / tokens.shape[0]
        assert np.abs(freq - probs[row]).max() < 0.035
    lp = np.log(probs)[np.arange(4)[None, :], np.asarray(tokens)]
    np.testing.assert_allclose(logprobs, lp, atol=1e-5)


def test_temperature_logprob_is_of_the_tempered_distribution():
    tokens, logprobs = draw(SamplingParams(temperature=0.5), n=64)
    lp = np.asarray(jax.nn.log_softmax(LOGITS / 0.5))[np.arange(4)[None, :], np.asarray(tokens)]
    np.testing.assert_allclose(logprobs, lp, atol=1e-5)


def test_top_k_support():
    tokens, _ = draw(SamplingParams(temperature=1.0, top_k=3))
    top3 = np.argsort(-np.asarray(LOGITS), axis=-1)[:, :3]
    for row in range(4):
        seen = set(np.asarray(tokens[:, row]).tolist())
        assert seen <= set(top3[row]) and len(seen) == 3


def test_top_p_support_is_the_nucleus():
    top_p = 0.7
    tokens, _ = draw(SamplingParams(temperature=1.0, top_p=top_p))
    probs = np.asarray(jax.nn.softmax(LOGITS))
    for row in range(4):
        order = np.argsort(-probs[row])
        before = np.cumsum(probs[row][order]) - probs[row][order]
        nucleus = set(order[before < top_p].tolist())  # smallest prefix reaching top_p
        assert set(np.asarray(tokens[:, row]).tolist()) == nucleus


def test_top_p_keeps_the_best_token_even_when_tiny():
    tokens, _ = draw(SamplingParams(temperature=1.0, top_p=1e-6), n=50)
    assert (np.asarray(tokens) == np.argmax(LOGITS, -1)).all()


@pytest.mark.parametrize("kw", [dict(temperature=-1.0), dict(top_k=-2), dict(top_p=0.0),
                                dict(top_p=1.5)])
def test_bad_params_are_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        SamplingParams(**kw)


def test_inverse_cdf_sample_is_the_inverse_cdf():
    # numpy reference: the first token whose cumulative probability exceeds u. V = 1000 is not a
    # power of two (the last block is padded) and every third token has zero probability.
    logits = np.random.RandomState(1).randn(3, 1000).astype(np.float32) * 3
    logits[:, ::3] = -np.inf
    uniforms = np.random.RandomState(2).rand(500, 3).astype(np.float32)
    tokens = np.asarray(jax.jit(jax.vmap(lambda u: inverse_cdf_sample(jnp.asarray(logits), u)))(
        jnp.asarray(uniforms)))
    cdf = np.cumsum(np.exp(logits - logits.max(-1, keepdims=True)), -1)
    cdf /= cdf[:, -1:]
    for row in range(3):
        expected = np.searchsorted(cdf[row], uniforms[:, row], side="right")
        # f32 sums in another order may move a draw lying within rounding of a boundary
        near = np.abs(cdf[row][np.minimum(expected, 999)] - uniforms[:, row]) < 1e-5
        assert (tokens[:, row] == expected)[~near].all() and (~near).sum() > 490
    assert np.isfinite(logits[np.arange(3)[None], tokens]).all()


def test_inverse_cdf_sample_never_draws_a_zero_probability_token():
    logits = jnp.asarray([[0.0, -jnp.inf, 0.0, -jnp.inf, -jnp.inf]] * 4)
    uniforms = jnp.asarray([0.0, 0.49, 0.51, 1.0 - 2 ** -24])
    np.testing.assert_array_equal(inverse_cdf_sample(logits, uniforms), [0, 0, 2, 2])
