"""InfoNCE against a numpy reference written from the formula, loop by loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.retrieval.loss import info_nce


def reference(q, d, false_negatives, temperature, symmetric):
    b, n = q.shape[0], d.shape[0]
    s = q @ d.T / temperature
    q_to_d = []
    for i in range(b):
        allowed = [s[i, j] for j in range(n) if not false_negatives[i, j]]
        q_to_d.append(-s[i, i] + np.log(np.sum(np.exp(allowed))))
    loss = np.mean(q_to_d)
    if symmetric:
        d_to_q = []
        for j in range(b):
            allowed = [s[i, j] for i in range(b) if not false_negatives[i, j]]
            d_to_q.append(-s[j, j] + np.log(np.sum(np.exp(allowed))))
        loss = (loss + np.mean(d_to_q)) / 2
    return loss


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("temperature", [0.05, 1.0])
def test_matches_reference(symmetric, temperature):
    rng = np.random.default_rng(0)
    q, d = unit(rng.normal(size=(4, 8))), unit(rng.normal(size=(10, 8)))
    false_negatives = np.zeros((4, 10), bool)
    false_negatives[0, 2] = false_negatives[3, 7] = false_negatives[1, 0] = True
    loss, metrics = info_nce(jnp.asarray(q), jnp.asarray(d), jnp.asarray(false_negatives),
                             temperature, symmetric)
    np.testing.assert_allclose(loss, reference(q, d, false_negatives, temperature, symmetric),
                               rtol=1e-5)
    assert metrics["loss"] == loss and 0 <= metrics["accuracy"] <= 1


def test_false_negatives_are_dropped_not_penalised():
    """A column masked for row i changes nothing when moved or rescaled, and gets no gradient."""
    rng = np.random.default_rng(1)
    q, d = unit(rng.normal(size=(3, 4))), unit(rng.normal(size=(5, 4)))
    mask = np.zeros((3, 5), bool)
    mask[:, 4] = True  # the last doc is relevant to every query
    loss = lambda docs: info_nce(jnp.asarray(q), docs, jnp.asarray(mask), 0.1)[0]
    moved = d.copy()
    moved[4] = q[0]  # now a perfect match for query 0: would be a hard negative if counted
    assert float(loss(jnp.asarray(d))) == pytest.approx(float(loss(jnp.asarray(moved))))
    grad = jax.grad(loss)(jnp.asarray(d))
    assert np.all(np.isfinite(grad)) and np.all(grad[4] == 0)


def test_perfect_separation_has_near_zero_loss_and_full_accuracy():
    e = jnp.eye(4)
    loss, metrics = info_nce(e, e, jnp.zeros((4, 4), bool), 0.01, symmetric=True)
    assert float(loss) < 1e-6 and float(metrics["accuracy"]) == 1.0
