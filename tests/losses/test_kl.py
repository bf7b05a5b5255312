"""KL estimators (Schulman 2020) against numpy."""

import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses.kl import kl_estimate


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators(estimator):
    rng = np.random.RandomState(0)
    lp = -rng.rand(4, 5) * 3
    ref = -rng.rand(4, 5) * 3
    r = np.exp(ref - lp)
    expected = {"k1": np.log(1 / r), "k2": 0.5 * np.log(r) ** 2, "k3": r - 1 - np.log(r)}[estimator]
    got = kl_estimate(jnp.asarray(lp, jnp.float32), jnp.asarray(ref, jnp.float32), estimator)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_k3_is_unbiased_for_the_true_kl():
    # E_{y~p}[k3] = KL(p || q) for categorical p, q
    rng = np.random.RandomState(1)
    p = rng.dirichlet(np.ones(6))
    q = rng.dirichlet(np.ones(6))
    ys = np.arange(6)
    k3 = np.asarray(kl_estimate(jnp.log(jnp.asarray(p[ys], jnp.float32)),
                                jnp.log(jnp.asarray(q[ys], jnp.float32)), "k3"))
    np.testing.assert_allclose((p * k3).sum(), (p * np.log(p / q)).sum(), atol=1e-5)
