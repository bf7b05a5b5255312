"""Per-token estimators of KL(pi || pi_ref) from the log-probs of sampled tokens.

Schulman (2020), "Approximating KL Divergence": with log r = log pi_ref(y) - log pi(y) and y ~ pi,
  k1 = -log r                 (unbiased, high variance, can be negative)
  k2 = (log r)^2 / 2          (biased, low variance)
  k3 = (r - 1) - log r        (unbiased, low variance, always >= 0; GRPO's estimator)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logprobs: Array, ref_logprobs: Array, estimator: str = "k3") -> Array:
    """Per-token KL estimate, shaped like `logprobs`; differentiable in `logprobs`."""
    log_r = ref_logprobs.astype(jnp.float32) - logprobs.astype(jnp.float32)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * jnp.square(log_r)
    if estimator == "k3":
        return jnp.expm1(log_r) - log_r
    raise ValueError(f"KL estimator {estimator!r} not in {KL_ESTIMATORS}")
