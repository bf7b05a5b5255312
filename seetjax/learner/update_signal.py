"""Whether an update on a batch can move anything: the trainer skips one that cannot (DAPO's
dynamic sampling, Yu et al. 2025, without the resampling).

The rule follows the estimator the run uses, computed by that estimator itself: a policy gradient
has signal iff its advantages are non-zero on some trained token of a row it keeps. So GRPO and
RLOO see nothing in groups of equal rewards, while REINFORCE's batch-mean baseline does when the
groups differ from each other. A term that pulls whatever the rewards (a KL or entropy term, PPO's
value baseline, SFT) always has signal, and so do preference pairs (DPO's, or SEET's
counterfactual records).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from seetjax import losses
from seetjax.batch import TrajectoryBatch, row_mask, target_mask
from seetjax.learner.config import LearnerConfig
from seetjax.losses.advantages import estimator_inputs


def update_has_signal(config: LearnerConfig, batch: TrajectoryBatch) -> bool:
    """Whether `config`'s update on `batch` (a rollout batch, `trajectory_batch` or
    `rollout_preferences`) would have a non-zero gradient (see the module docstring)."""
    policy = config.term("policy_gradient")
    if config.term("value") or config.term("sft") or (policy and (
            policy.config.kl_coef or policy.config.entropy_coef
            or config.advantage_config.needs_values)):  # a critic's values: never all exact
        return True
    if batch.pairs is not None and float(np.asarray(batch.pairs.weights).sum()) > 0 and (
            config.term("dpo") or config.term("counterfactual")):
        return True
    if policy is None or batch.sequences is None:
        return False
    return bool(_advantages_move(config.advantage, config.advantage_config, batch.token_rewards,
                                 batch.reward_mask, batch.group_ids, batch.sequences,
                                 batch.step_keys, batch.turn_starts))


@functools.partial(jax.jit, static_argnums=(0, 1))
def _advantages_move(name: str, config, token_rewards, reward_mask, group_ids, sequences,
                     step_keys, turn_starts):
    """Whether estimator `name`'s advantages are non-zero on a trained token of a kept row, with
    the layout the learner gives it (`seetjax.learner.objective`)."""
    advantages, weights = losses.get(name, kind="advantage").fn(
        token_rewards, reward_mask, group_ids, row_mask(sequences), config,
        **estimator_inputs(config, step_keys, turn_starts))
    trained = (target_mask(sequences) > 0) & (weights[:, None] > 0)
    return jnp.any((advantages != 0) & trained)
