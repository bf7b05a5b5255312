"""Per-token KL estimators from the log-probs of sampled tokens, and what their gradients estimate.

J. Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html): with
log r = log pi_ref(y) - log pi(y) and y ~ pi,
  k1 = -log r                 (unbiased for KL(pi || ref), high variance, can be negative)
  k2 = (log r)^2 / 2          (biased for KL(pi || ref), low variance, >= 0)
  k3 = (r - 1) - log r        (unbiased for KL(pi || ref), low variance, >= 0; GRPO's estimator)
As *values* all three estimate the reverse KL, KL(pi || ref). As *losses* their gradients
estimate different things: the note is about values, and an unbiased value does not make an
unbiased gradient (Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation for
RL"). With y ~ pi on-policy and the gradient flowing only through log pi(y) (the sample fixed):

  in the loss (kl_in_reward=False, kl_coef * k added to the loss):
    k1: E[grad k1] = E[grad log pi(y)] = 0 -- zero expected gradient: no KL regularisation at all,
        only noise. Rejected by LearnerConfig.
    k2: E[grad k2] = E[log(pi/ref)(y) grad log pi(y)] = grad KL(pi || ref) -- unbiased gradient of
        the reverse KL (though the value is biased).
    k3: E[grad k3] = E[(1 - ref/pi)(y) grad log pi(y)] = -sum_y ref(y) grad log pi(y)
        = grad KL(ref || pi) -- an unbiased gradient of the FORWARD KL, not of KL(pi || ref)
        (GRPO's penalty, as DeepSeekMath uses it).
  in the reward (kl_in_reward=True, kl_coef * sum_t k_t subtracted from the return, no gradient
  through k; the policy gradient then contributes E[k(y) grad log pi(y)]):
    k1: E[k1 grad log pi] = grad KL(pi || ref) -- unbiased (InstructGPT/PPO's penalty);
    k2, k3: biased -- the score-function term of grad E[k] misses E[grad k], which is not zero for
        them (for k3 it is grad KL(ref || pi)).
These are per-token statements at the sampled prefixes (the conditional KL of each position);
off-policy steps (PPO epochs, stale samples) hold them only approximately. `tests/losses/test_kl.py`
checks each of them exactly on a categorical policy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seetjax.errors import invalid

Array = jax.Array

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logprobs: Array, ref_logprobs: Array, estimator: str = "k3") -> Array:
    """Per-token estimate of KL(pi || pi_ref) for tokens sampled from pi, shaped like `logprobs`;
    differentiable in `logprobs`. Its value's expectation is KL(pi || ref) for k1 and k3 (biased
    for k2); its expected gradient is 0 for k1, grad KL(pi || ref) for k2 and grad KL(ref || pi)
    for k3 (see the module docstring: pick k2 for a reverse-KL penalty in the loss, k1 for one in
    the reward)."""
    log_r = ref_logprobs.astype(jnp.float32) - logprobs.astype(jnp.float32)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * jnp.square(log_r)
    if estimator == "k3":
        return jnp.expm1(log_r) - log_r
    raise invalid("kl_estimate", "estimator", estimator, f"one of {KL_ESTIMATORS}")
