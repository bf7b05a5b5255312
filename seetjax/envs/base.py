"""The ToolEnv protocol: multi-turn tool-use episodes, message in, observation out.

An episode is a sequence of user turns. `reset(task)` returns the opening messages (system prompt
and the first user turn). The model then acts by producing assistant messages; `step(text)` reads
one. Within a turn the model may call tools step after step; a message without calls ends the turn,
and the environment answers with the next turn's user messages (or ends the episode after the
last). Each step reports a `StepCode`; each finished turn a `TurnVerdict` from the checker.

Everything here is plain Python data: the rollout side turns it into token segments.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol

from seetjax.tools.calls import ParseError, ToolCall
from seetjax.tools.executor import ExecutionResult

Message = dict[str, Any]


class StepCode(enum.IntEnum):
    """What one assistant message was. The values are EnvTuning's per-step codes (its
    `user_turn_rewards`: -3 format error, -2 failed tool call, -1 clean tool call, and 0/1 for a
    turn verdict, see `seetjax.rewards.envtuning`)."""

    FORMAT_ERROR = -3  # the message attempted calls that could not be parsed
    EXECUTION_ERROR = -2  # calls parsed, at least one failed (unknown tool, bad arguments, API error)
    CLEAN_CALL = -1  # calls parsed and all ran without error
    NO_CALL = 0  # a plain answer: it ends the turn


@dataclass(frozen=True)
class TurnVerdict:
    """The checker's verdict on one user turn.

    `checked` turns expect calls (non-empty ground truth): BFCL's state and response checks
    decide them, and an entry is correct when all of them pass. Unchecked turns expect no call
    (miss_func, miss_param): they pass when the model made none, BFCL's irrelevance rule, which
    the official entry score does not use but EnvTuning's progress reward does.
    `error_type` uses bfcl_eval's names (`multi_turn:instance_state_mismatch`, ...).
    """

    turn: int
    passed: bool
    checked: bool
    error_type: str | None = None
    message: str = ""


@dataclass(frozen=True)
class StepResult:
    """What the environment answers to one assistant message.

    `observations` are the messages to append after the assistant message: tool results while the
    turn goes on, the next user turn after a turn ends, nothing once the episode is over.
    `verdicts` holds the verdicts of the turns this step ended (one, or on a timeout the current
    and every remaining turn).
    """

    turn: int
    code: StepCode
    observations: tuple[Message, ...]
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ExecutionResult, ...] = ()
    parse_error: ParseError | None = None
    verdicts: tuple[TurnVerdict, ...] = ()
    timeout: bool = False
    done: bool = False

    @property
    def turn_ended(self) -> bool:
        return bool(self.verdicts)


@dataclass(frozen=True)
class EpisodeTrace:
    """A finished (or ongoing) episode: every step, every turn verdict so far, and the ground
    truth calls per turn. Rewards are functions of this record.

    `truncated`: the rollout cut the episode off before the environment ended it (its context was
    full); the turns it never reached have no verdict and count as failed, and rewards treat the
    cut like a force-termination (`StepResult.timeout`)."""

    task_id: str
    steps: tuple[StepResult, ...]
    verdicts: tuple[TurnVerdict, ...]
    ground_truth: tuple[tuple[ToolCall, ...], ...]
    truncated: bool = False

    @property
    def num_turns(self) -> int:
        return len(self.ground_truth)

    def unattempted_turns(self) -> set[int]:
        """The turns that expected calls which the model reached and failed without attempting a
        single call: each of its messages there was a plain answer (`StepCode.NO_CALL`). Turns
        skipped by a timeout or a cut-off were never reached, so they are not among them; replies
        that never reached the environment (SEET's intercepted attempts) are not in the trace, so
        not attempts."""
        reached: dict[int, bool] = {}
        for step in self.steps:
            reached[step.turn] = reached.get(step.turn, False) or step.code != StepCode.NO_CALL
        return {v.turn for v in self.verdicts if v.checked and not v.passed
                and self.ground_truth[v.turn] and reached.get(v.turn) is False}

    def calls_per_turn(self) -> list[list[ToolCall]]:
        """The parsed calls the model made in each turn (failed ones included)."""
        out: list[list[ToolCall]] = [[] for _ in range(self.num_turns)]
        for step in self.steps:
            out[step.turn].extend(step.calls)
        return out


class ToolEnv(Protocol):
    """A multi-turn tool-use environment (see the module docstring): the rollout's only view of
    one. What SEET's mechanics need beyond it is optional, `seetjax.envs.capabilities`."""

    def reset(self, task: Any) -> list[Message]:
        """Starts an episode on `task`; returns its opening messages."""
        ...

    def step(self, assistant_text: str) -> StepResult:
        """Reads one assistant message and returns the environment's answer."""
        ...

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """Tool entries for a chat template's native tools section, when the prompt style uses it."""
        ...

    def trace(self) -> EpisodeTrace:
        """The episode so far."""
        ...

