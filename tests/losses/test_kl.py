"""KL estimators (Schulman 2020) against numpy: values, and the expected gradient of each as a
loss and as a reward penalty."""

import jax
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


# Expected gradients on a categorical policy pi = softmax(theta), exact over the vocabulary: the
# claims of seetjax.losses.kl's docstring, against numpy's analytic gradients.
V = 7


def _policy_and_ref(seed):
    rng = np.random.RandomState(seed)
    theta = rng.randn(V)
    ref = rng.dirichlet(np.ones(V))
    pi = np.exp(theta - theta.max())
    return theta, pi / pi.sum(), ref


def _analytic_gradients(pi, ref):
    """d/dtheta of KL(pi || ref) and of KL(ref || pi), for pi = softmax(theta)."""
    g = np.log(pi / ref)
    reverse = pi * (g - (pi * g).sum())
    forward = pi - ref  # -sum_y ref(y) (e_y - pi)
    return reverse, forward


def _expected_gradient(theta, ref, estimator, in_reward):
    """sum_y pi(y) * grad of the per-sample term for sample y: in the loss, grad k(y) through
    log pi(y); in the reward, the score-function term sg[k(y)] * grad log pi(y)."""
    log_ref = jnp.log(jnp.asarray(ref, jnp.float32))

    def surrogate(t):
        logp = jax.nn.log_softmax(t)
        weights = jax.lax.stop_gradient(jnp.exp(logp))  # the sampling distribution, no gradient
        k = kl_estimate(logp, log_ref, estimator)
        per_sample = jax.lax.stop_gradient(k) * logp if in_reward else k
        return jnp.sum(weights * per_sample)

    return np.asarray(jax.grad(surrogate)(jnp.asarray(theta, jnp.float32)), np.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expected_gradient_of_each_estimator_in_the_loss(seed):
    theta, pi, ref = _policy_and_ref(seed)
    reverse, forward = _analytic_gradients(pi, ref)
    assert np.abs(reverse - forward).max() > 1e-2  # the two directions differ here
    np.testing.assert_allclose(_expected_gradient(theta, ref, "k1", False), 0.0, atol=1e-6)
    np.testing.assert_allclose(_expected_gradient(theta, ref, "k2", False), reverse, atol=1e-5)
    np.testing.assert_allclose(_expected_gradient(theta, ref, "k3", False), forward, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expected_gradient_of_each_estimator_in_the_reward(seed):
    theta, pi, ref = _policy_and_ref(seed)
    reverse, forward = _analytic_gradients(pi, ref)
    np.testing.assert_allclose(_expected_gradient(theta, ref, "k1", True), reverse, atol=1e-5)
    # k3 in the reward: grad E[k3] minus the E[grad k3] it leaves out, i.e. reverse - forward.
    np.testing.assert_allclose(_expected_gradient(theta, ref, "k3", True), reverse - forward,
                               atol=1e-5)
    for estimator in ("k2", "k3"):
        assert np.abs(_expected_gradient(theta, ref, estimator, True) - reverse).max() > 1e-3


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_values_are_unbiased_for_the_reverse_kl(estimator):
    _, pi, ref = _policy_and_ref(3)
    k = np.asarray(kl_estimate(jnp.log(jnp.asarray(pi, jnp.float32)),
                               jnp.log(jnp.asarray(ref, jnp.float32)), estimator))
    np.testing.assert_allclose((pi * k).sum(), (pi * np.log(pi / ref)).sum(), atol=1e-5)
