"""The reward a run optimises, chosen by name (`config.reward.kind`), as rewards attached to steps.

    progress  EnvTuning's progress (`progress_reward`): one episode reward
    agent     the five-part agent reward with penalties (`agent_reward`, `AgentRewardConfig`):
              one episode reward
    shaped    step-wise shaping (`step_rewards`, `ShapingConfig`): one reward per turn, on the
              message that ended it (`placed_rewards`; per message with `per_turn=False`)
    env       the environment's own episode reward (`seetjax.envs.capabilities.ScoresEpisodes`,
              e.g. the QA search reward): one episode reward, placed by the episode
              (`seetjax.rollout.episode.Episode.rewards`), not computed from the trace

Every kind is expressed the same way, as a list of (step, reward): `step` indexes the episode's
`EpisodeTrace.steps` (the reward scores the assistant message that step read), or is None for a
reward on the episode as a whole (an episode reward; the shaped kind's timeout of an episode the
rollout cut off). The rollout places each reward on the last generated token of
the message it scores (None: of the episode's last message), so the learner sees one layout, a
[B, T] token-reward array, whatever the kind: an episode reward is a single reward at the end of
the row, and the advantage estimators reduce to their outcome-reward forms on it.

The kinds computed here are tested against gaming (`seetjax.rewards.gaming`): no cheap behaviour
(silence, harmless or repeated calls, garbage arguments, giving up) scores above an honest attempt
at the same turn. Progress scores every failed turn 0 whatever was called; the agent and shaped
kinds score a failed turn without progress toward its ground truth as silence.
"""

from __future__ import annotations

import dataclasses

from seetjax.envs.base import EpisodeTrace
from seetjax.errors import invalid
from seetjax.rewards.agent import AgentRewardConfig, agent_reward
from seetjax.rewards.envtuning import progress_reward
from seetjax.rewards.shaping import ShapingConfig, placed_rewards

REWARD_KINDS = ("progress", "agent", "shaped", "env")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """kind: one of REWARD_KINDS; agent / shaping: the settings of the "agent" / "shaped" kinds
    (kept for every kind, so a config names them all)."""

    kind: str = "progress"
    agent: AgentRewardConfig = AgentRewardConfig()
    shaping: ShapingConfig = ShapingConfig()

    def __post_init__(self):
        if self.kind not in REWARD_KINDS:
            raise invalid(self, "kind", self.kind, f"one of {REWARD_KINDS}")

    @property
    def stepwise(self) -> bool:
        """Whether an episode gets one reward per step rather than one for the whole episode."""
        return self.kind == "shaped"


def assigned_rewards(trace: EpisodeTrace, config: RewardConfig) -> list[tuple[int | None, float]]:
    """The episode's rewards under `config.kind`, each with the index of the trace step it scores
    (None: the episode as a whole). Their sum is the episode's return. The "env" kind needs the
    environment, not its trace: `Episode.rewards` scores it."""
    if config.kind == "env":
        raise ValueError("reward kind 'env' is the environment's own: score it with the episode")
    if config.kind == "shaped":
        # A cut-off episode's timeout scores its last message, which may come after the last
        # step the environment saw (a reply intercepted, or left without a step, before the
        # cut): it is the episode's, so it goes on the episode's end.
        steps = placed_rewards(dataclasses.replace(trace, truncated=False), config.shaping)
        return steps + [(None, config.shaping.timeout)] * trace.truncated
    if config.kind == "agent":
        return [(None, agent_reward(trace, config.agent).total)]
    return [(None, progress_reward(trace))]
