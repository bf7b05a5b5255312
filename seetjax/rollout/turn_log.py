"""What one turn of an episode logs: its replies, the calls executed, retries, hints and
interceptions, and its verdict (`TurnLog`), for rewards, anchors and the slow loop."""

from __future__ import annotations

import dataclasses

from seetjax.seet.records import StepView
from seetjax.tools.calls import ToolCall


@dataclasses.dataclass
class TurnLog:
    """One turn of an episode as it was played (`passed` None until judged)."""

    turn: int
    state_key: str  # the state before the turn (see seet.anchors)
    replies: list[StepView] = dataclasses.field(default_factory=list)
    accepted: list[ToolCall] = dataclasses.field(default_factory=list)  # executed, turn order
    tokens: int = 0
    retries: int = 0
    interceptions: int = 0
    hints: int = 0
    passed: bool | None = None  # None until judged
    checked: bool = False

    @property
    def failed(self) -> bool:
        return self.passed is False

    @property
    def silent(self) -> bool:
        """Failed without an attempted call: every reply of the turn was well-formed prose.
        Intercepted and retried attempts count as attempts (the reward's
        `EpisodeTrace.unattempted_turns` sees only the replies that reached the environment)."""
        return (self.failed and bool(self.replies)
                and not any(r.calls or not r.well_formed for r in self.replies))
