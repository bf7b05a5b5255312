"""What SEET's mechanics need from an environment beyond `ToolEnv`, one small protocol each.

The rollout (`seetjax.rollout.episode`) uses a mechanism only where its environment provides it:

- `ReadsCalls`: the reply's calls read before the step (interception looks at them first) and a
  per-reply say on whether a format error ends the turn (the fast loop's format-error retries).
  Without it a failed step that leaves the turn open may still be retried, and anchors render
  calls in the python format.
- `Rewindable`: snapshots of the episode, so a retried attempt dropped from the context
  (`training_context="drop"`) is undone in the environment too; without it such attempts are
  not retried.
- `Hints`: the augmented environment's actionable hint for a failed step.
- `GroundTruth`: the current turn's expected calls and a check that two call sequences end
  alike, for stage 2's interception.
- `ScoresEpisodes`: the environment's own reward of an episode, part by part (`reward.kind="env"`
  trains on its total; rollouts log its parts as `rollout/env_<part>`).

Verdicts (anchors, FPLD and counterfactual records need verified-correct turns) come through
`ToolEnv` itself, in each `StepResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from seetjax.envs.base import StepResult
from seetjax.tools.calls import ParseError, ToolCall


@runtime_checkable
class ReadsCalls(Protocol):
    """Reads a reply's calls without acting on them; `step` takes `format_error_ends_turn`, the
    fast loop's per-reply decision (None: the environment's own rule)."""

    @property
    def call_format(self) -> str:
        """How calls are written: "python" or "hermes"."""
        ...

    def parse_calls(self, text: str) -> list[ToolCall] | ParseError:
        """The calls of `text`, read exactly as `step` would read them."""
        ...

    def step(self, assistant_text: str, format_error_ends_turn: bool | None = None) -> StepResult:
        ...


@runtime_checkable
class Rewindable(Protocol):
    def snapshot(self) -> Any:
        """A copy of the episode so far."""
        ...

    def restore(self, snapshot: Any) -> None:
        """Returns the episode to `snapshot`, which stays valid for further restores."""
        ...


@runtime_checkable
class Hints(Protocol):
    def hint(self, step: StepResult) -> str | None:
        """An actionable hint for a failed step, never built from the ground truth; None for
        other steps."""
        ...


@runtime_checkable
class GroundTruth(Protocol):
    def expected_calls(self) -> Sequence[ToolCall]:
        """The current turn's ground-truth calls."""
        ...

    def same_outcome(self, a: Sequence[ToolCall], b: Sequence[ToolCall]) -> bool:
        """Whether running `a` and running `b` from the current state end alike (the turn
        check's notion of equal); leaves the episode as it was."""
        ...


@runtime_checkable
class ScoresEpisodes(Protocol):
    def episode_reward(self, truncated: bool) -> dict[str, float]:
        """The episode's reward, part by part, with the sum trained on under "total"; the
        episode is over, or `truncated`: the rollout cut it off first (scored as a timeout)."""
        ...
