"""Rewards computed from an episode record (`EpisodeTrace`): EnvTuning's progress and format
rewards, per-step shaping from step codes, the five-component agent reward with penalties, the
run's choice among them (`RewardConfig`, `assigned_rewards`), and what keeps them from being
gamed (`gaming`: progress toward a turn's ground truth, and the hack detectors' metrics).

Imports `envs` (the episode record and BFCL's checker); never `rollout` or anything above.
"""

from seetjax.rewards.agent import AgentReward, AgentRewardConfig, agent_reward
from seetjax.rewards.envtuning import (
    EnvTuningScores,
    envtuning_scores,
    format_reward,
    progress_reward,
    step_codes,
)
from seetjax.rewards.gaming import (
    gaming_metrics,
    repeated_calls,
    turn_progress,
    unproductive_turns,
)
from seetjax.rewards.kinds import REWARD_KINDS, RewardConfig, assigned_rewards
from seetjax.rewards.shaping import ShapingConfig, placed_rewards, step_rewards

__all__ = ["REWARD_KINDS", "AgentReward", "AgentRewardConfig", "EnvTuningScores", "RewardConfig",
           "ShapingConfig", "agent_reward", "assigned_rewards", "envtuning_scores",
           "format_reward", "gaming_metrics", "placed_rewards", "progress_reward",
           "repeated_calls", "step_codes", "step_rewards", "turn_progress", "unproductive_turns"]
