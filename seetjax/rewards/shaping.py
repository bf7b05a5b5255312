"""Per-step shaping rewards from step codes.

Each assistant message gets the value of its `StepCode`, plus the value of the turn verdict it
produced, plus a timeout value if it ended the episode early: force-terminated by the environment,
or the last message of an episode the rollout cut off when its context was full
(`EpisodeTrace.truncated`). With `reward.kind="shaped"` (`seetjax.rewards.kinds`) the rollout
places each on the last generated token of its message, and the advantage estimators credit it to
the tokens up to there (step-level credit assignment); their sum is the episode's return.
Defaults follow the order of EnvTuning's codes: a format error is worse than a failed call, which
is worse than a clean one; a passed turn is the only positive signal.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from seetjax.envs.base import EpisodeTrace, StepCode


@dataclass(frozen=True)
class ShapingConfig:
    format_error: float = -0.5
    execution_error: float = -0.2
    clean_call: float = 0.0
    no_call: float = 0.0
    turn_passed: float = 1.0
    turn_failed: float = 0.0
    timeout: float = -1.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{f.name}={value!r} must be a finite number")

    def code_value(self, code: StepCode) -> float:
        return {StepCode.FORMAT_ERROR: self.format_error,
                StepCode.EXECUTION_ERROR: self.execution_error,
                StepCode.CLEAN_CALL: self.clean_call, StepCode.NO_CALL: self.no_call}[code]


def step_rewards(trace: EpisodeTrace, config: ShapingConfig | None = None) -> list[float]:
    """One shaping reward per environment step (`trace.steps`, each reading one assistant
    message), in order."""
    config = config or ShapingConfig()
    rewards = []
    last = len(trace.steps) - 1
    for i, step in enumerate(trace.steps):
        value = config.code_value(step.code)
        # Only the turn the message itself ended is judged here; the turns a timeout skipped are
        # covered by the timeout value.
        for verdict in step.verdicts[:1]:
            value += config.turn_passed if verdict.passed else config.turn_failed
        if step.timeout or (trace.truncated and i == last):
            value += config.timeout
        rewards.append(value)
    return rewards
