"""Rewards computed from an episode record (`EpisodeTrace`): EnvTuning's progress and format
rewards, per-step shaping from step codes, and the five-component agent reward with penalties."""

from seetjax.rewards.agent import AgentReward, AgentRewardConfig, agent_reward
from seetjax.rewards.envtuning import (
    EnvTuningScores,
    envtuning_scores,
    format_reward,
    progress_reward,
    step_codes,
)
from seetjax.rewards.shaping import ShapingConfig, step_rewards

__all__ = ["AgentReward", "AgentRewardConfig", "EnvTuningScores", "ShapingConfig", "agent_reward",
           "envtuning_scores", "format_reward", "progress_reward", "step_codes", "step_rewards"]
