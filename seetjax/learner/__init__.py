"""The jitted, sharded, checkpointed learner: train state, optimizer, update step, checkpoints.

Imports `losses`, `models`, `runtime` and `batch`; never environments or the rollout.
"""

from seetjax.learner.config import ALGORITHMS, LearnerConfig, LossTerm, OptimizerConfig, learner_config
from seetjax.learner.learner import Learner, create_learner, validate_batch
from seetjax.learner.state import TrainState

__all__ = ["ALGORITHMS", "Learner", "LearnerConfig", "LossTerm", "OptimizerConfig", "TrainState",
           "create_learner", "learner_config", "validate_batch"]
