"""The gradient-estimate variance between micro-batches against numpy of its definition."""

import jax.numpy as jnp
import numpy as np

from seetjax.learner.step import gradient_variance


def test_gradient_variance_is_the_spread_of_the_micro_batch_estimates():
    rng = np.random.default_rng(0)
    shares = [{"a": rng.normal(size=(3, 2)), "b": rng.normal(size=4)} for _ in range(4)]
    total = {k: sum(s[k] for s in shares) for k in shares[0]}
    flat = np.stack([np.concatenate([s["a"].ravel(), s["b"]]) for s in shares])
    estimates = 4 * flat  # each micro-batch's estimate of the whole gradient
    expected = np.sum((estimates - flat.sum(0)) ** 2) / 3
    squares = sum(np.sum(f ** 2) for f in flat)
    got = gradient_variance(jnp.float32(squares), jax_tree(total), 4)
    np.testing.assert_allclose(float(got), expected, rtol=1e-5)
    assert float(gradient_variance(jnp.float32(squares), jax_tree(total), 1)) == 0.0


def jax_tree(tree):
    return {k: jnp.asarray(v, jnp.float32) for k, v in tree.items()}
