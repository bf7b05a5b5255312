"""Token-level rewards in the learner: an episode reward placed anywhere at or after a row's last
trained token trains exactly like the [B] reward it replaces, for every estimator; step rewards
reach the policy gradient; a KL folded into the reward stays an outcome penalty for the
critic-free estimators."""

import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import flat_arrays, make_learner, rl_batch

from seetjax.batch import row_mask, target_mask
from seetjax.learner import learner_config
from seetjax.learner.objective import Prepared, _advantages
from seetjax.losses import advantages as adv
from seetjax.losses.kl import kl_estimate


def at_row_end(batch):
    """The batch's rewards as token rewards on each row's last position (after its last trained
    token, on padding: where a reply kept without loss would put an episode reward)."""
    rows, length = batch.sequences.shape
    marks = np.zeros((rows, length), np.float32)
    marks[:, -1] = 1.0
    return batch.replace(token_rewards=marks * batch.rewards[:, None], reward_mask=marks)


@pytest.mark.parametrize("spec", [
    {"algorithm": "grpo"},
    {"algorithm": "dapo"},
    {"algorithm": "rloo"},
    {"algorithm": "reinforce"},
    {"algorithm": "grpo", "loss": {"kl_in_reward": True, "kl_estimator": "k1", "kl_coef": 0.1}},
    {"algorithm": "ppo"},
], ids=lambda s: s["algorithm"] + ("_kl_in_reward" if "loss" in s else ""))
def test_an_episode_reward_after_the_last_trained_token_is_the_outcome_reward(spec, model,
                                                                              value_model):
    learner, state = make_learner(value_model if spec["algorithm"] == "ppo" else model, spec)
    batch = rl_batch(seed=5)
    grads, metrics = learner.gradients(state, batch)
    token_grads, token_metrics = learner.gradients(state, at_row_end(batch))
    a, b = flat_arrays(grads), flat_arrays(token_grads)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    for key in ("loss", "pg_loss"):
        assert float(metrics[key]) == float(token_metrics[key])


def test_step_rewards_reach_the_policy_gradient(model):
    """Two rewards per row (on the first and on the last trained token) are not their sum at the
    end: the first generated turn is credited differently."""
    learner, state = make_learner(model, {"algorithm": "grpo"})
    batch = rl_batch(seed=6)
    mask = np.asarray(target_mask(batch.sequences))
    first = (np.cumsum(mask, 1) == 1) & (mask > 0)
    last = np.asarray(adv.last_position(jnp.asarray(mask))) * (mask.sum(1, keepdims=True) > 0)
    rng = np.random.RandomState(0)
    early = rng.randn(*mask.shape).astype(np.float32) * first
    steps = batch.replace(token_rewards=early + last * batch.rewards[:, None],
                          reward_mask=np.maximum(first, last).astype(np.float32))
    summed = at_row_end(batch.replace(rewards=batch.rewards + early.sum(1)))
    a, b = flat_arrays(learner.gradients(state, steps)[0]), flat_arrays(
        learner.gradients(state, summed)[0])
    assert any(not np.allclose(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce"])
def test_kl_in_the_reward_is_an_outcome_penalty_without_a_critic(name):
    """r_i - kl_coef * sum_t KL_t on the row's last reward (the outcome form's penalty)."""
    cfg = learner_config({"algorithm": name, "loss": {"kl_in_reward": True, "kl_estimator": "k1",
                                                       "kl_coef": 0.1}})
    batch = rl_batch(seed=7)
    rng = np.random.RandomState(1)
    mask = target_mask(batch.sequences)
    ref = jnp.asarray(batch.old_logprobs + rng.randn(*mask.shape).astype(np.float32) * 0.1)
    batch = batch.replace(ref_logprobs=ref)
    prepared, _ = _advantages(Prepared(batch=batch, mask=mask), cfg)
    kl = kl_estimate(batch.old_logprobs, ref, "k1") * mask
    penalised = jnp.asarray(batch.rewards) - 0.1 * jnp.sum(kl, -1)
    token_rewards, marks = adv.outcome_rewards(penalised, mask)
    want, _ = getattr(adv, f"{name}_advantages")(token_rewards, marks, batch.group_ids,
                                                 row_mask(batch.sequences), cfg.advantage_config)
    np.testing.assert_array_equal(np.asarray(prepared.advantages) * np.asarray(mask),
                                  np.asarray(want) * np.asarray(mask))
