"""Log-prob gathering and entropy against numpy's log-softmax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses.logprobs import (
    chunked_token_stats,
    preceding,
    sequence_token_stats,
    target_token_stats,
    token_stats,
)


def np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_stats_match_numpy(temperature):
    rng = np.random.RandomState(0)
    logits = rng.randn(3, 5, 11).astype(np.float32) * 3
    targets = rng.randint(0, 11, (3, 5))
    ls = np_log_softmax(logits.astype(np.float64) / temperature)
    stats = token_stats(jnp.asarray(logits), jnp.asarray(targets), temperature)
    np.testing.assert_allclose(stats.logprobs, np.take_along_axis(ls, targets[..., None], -1)[..., 0],
                               atol=1e-5)
    np.testing.assert_allclose(stats.entropy, -(np.exp(ls) * ls).sum(-1), atol=1e-5)
    np.testing.assert_allclose(stats.mean_logprobs, ls.mean(-1), atol=1e-5)


def test_chunked_equals_unchunked_with_gradients():
    rng = np.random.RandomState(1)
    hidden = jnp.asarray(rng.randn(2, 10, 4), jnp.float32)
    w = jnp.asarray(rng.randn(4, 13), jnp.float32)
    targets = jnp.asarray(rng.randint(0, 13, (2, 10)))

    def total(w, chunk):
        s = chunked_token_stats(hidden, targets, lambda h: h @ w, 0.9, chunk)
        return jnp.sum(s.logprobs) + jnp.sum(s.entropy), s

    (full, s_full), g_full = jax.value_and_grad(total, has_aux=True)(w, 0)
    (part, s_part), g_part = jax.value_and_grad(total, has_aux=True)(w, 4)  # 10 = 4 + 4 + 2 (padded)
    np.testing.assert_allclose(part, full, rtol=1e-6)
    np.testing.assert_allclose(s_part.logprobs, s_full.logprobs, atol=1e-6)
    np.testing.assert_allclose(g_part, g_full, atol=1e-5)


def test_sequence_stats_are_aligned_with_the_predicted_token():
    rng = np.random.RandomState(2)
    hidden = rng.randn(2, 6, 4).astype(np.float32)
    w = rng.randn(4, 9).astype(np.float32)
    tokens = rng.randint(0, 9, (2, 6))
    stats = sequence_token_stats(jnp.asarray(hidden), jnp.asarray(tokens), lambda h: h @ w)
    ls = np_log_softmax((hidden @ w).astype(np.float64))
    expected = np.zeros((2, 6))
    for b in range(2):
        for t in range(1, 6):  # token t is predicted from position t - 1
            expected[b, t] = ls[b, t - 1, tokens[b, t]]
    np.testing.assert_allclose(stats.logprobs, expected, atol=1e-5)


@pytest.mark.parametrize("chunk", [0, 2])
def test_target_stats_equal_the_full_ones_at_targets_with_gradients(chunk):
    """Targets at position 0 (never predicted), at the last position, a row with none, a row
    using the whole width: the gathered head gives the full head's stats and gradients there,
    0 elsewhere."""
    rng = np.random.RandomState(3)
    hidden = jnp.asarray(rng.randn(3, 8, 4), jnp.float32)
    tokens = jnp.asarray(rng.randint(0, 11, (3, 8)))
    targets = np.zeros((3, 8), bool)
    targets[0, [0, 2, 3, 7]] = True
    targets[2, [1, 4, 5, 6]] = True
    targets = jnp.asarray(targets)
    w = jnp.asarray(rng.randn(4, 11), jnp.float32)

    def total(w, gathered):
        if gathered:
            s = target_token_stats(hidden, tokens, targets, 4, lambda h: h @ w, 0.8, chunk)
        else:
            s = sequence_token_stats(hidden, tokens, lambda h: h @ w, 0.8)
        s = jax.tree.map(lambda x: x * targets, s)
        return jnp.sum(s.logprobs) + jnp.sum(s.entropy) + jnp.sum(s.mean_logprobs), s

    (full, s_full), g_full = jax.value_and_grad(total, has_aux=True)(w, False)
    (part, s_part), g_part = jax.value_and_grad(total, has_aux=True)(w, True)
    raw = target_token_stats(hidden, tokens, targets, 4, lambda h: h @ w, 0.8, chunk)
    expected_nonzero = np.asarray(targets).copy()
    expected_nonzero[:, 0] = False  # position 0 has no predecessor: nothing to score
    assert np.array_equal(np.asarray(raw.logprobs) != 0, expected_nonzero)
    np.testing.assert_allclose(s_part.logprobs, s_full.logprobs * expected_nonzero, atol=1e-6)
    np.testing.assert_allclose(s_part.entropy, s_full.entropy * expected_nonzero, atol=1e-5)
    np.testing.assert_allclose(part, full, rtol=1e-6)
    np.testing.assert_allclose(g_part, g_full, atol=1e-5)


def test_stats_predicted_from_named_slots():
    """With `previous` naming each token's predecessor slot (packed rows sharing prefixes), the
    stats are those of a row laid in that order: here slot 3 is a second branch after slot 1,
    so [0, 1, 3] is a sequence; previous = t - 1 is the plain shift."""
    rng = np.random.RandomState(4)
    hidden = jnp.asarray(rng.randn(1, 4, 4), jnp.float32)
    tokens = jnp.asarray([[3, 5, 7, 9]])
    w = jnp.asarray(rng.randn(4, 11), jnp.float32)
    head = lambda h: h @ w  # noqa: E731
    shifted = sequence_token_stats(hidden, tokens, head)
    plain = sequence_token_stats(hidden, tokens, head, previous=jnp.asarray([[-1, 0, 1, 2]]))
    np.testing.assert_allclose(plain.logprobs, shifted.logprobs, atol=1e-6)
    tree = jnp.asarray([[-1, 0, 1, 1]])
    branched = sequence_token_stats(hidden, tokens, head, previous=tree)
    row = sequence_token_stats(hidden[:, [0, 1, 3]], tokens[:, [0, 1, 3]], head)
    # the branch's token 9 (slot 3) is predicted from slot 1, as in the row [3, 5, 9]
    np.testing.assert_allclose(branched.logprobs[:, [0, 1, 3]], row.logprobs, atol=1e-6)
    targets = jnp.asarray([[False, True, True, True]])
    gathered = target_token_stats(hidden, tokens, targets, 4, head, previous=tree)
    np.testing.assert_allclose(gathered.logprobs, branched.logprobs, atol=1e-6)
    np.testing.assert_allclose(preceding(jnp.arange(4.0)[None], tree), [[0, 0, 1, 1]])
