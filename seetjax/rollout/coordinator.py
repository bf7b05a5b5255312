"""The coordinator's environment in a multi-agent QA rollout (`seetjax.rollout.multi_agent`).

A `ToolEnv` with two tools: `delegate(question)` hands a sub-question to a worker agent (a search
agent on the QA environment) and shows the worker's answer; `answer(text)` ends the episode with
the team's answer. One call per reply: a reply with several calls, or calls that cannot be read,
gets an `Error: ...` observation. Every reply is one round; a reply that would keep the episode
open at the round cap (`max_rounds`) ends it as a timeout (its delegation is not run). A reply
without calls ends the episode with its text as the answer, without the format credit.

The rollout reads a reply's delegation first (`delegation`), runs the worker, hands its answer
over (`deliver`), then steps. The episode's reward is its credit (`seetjax.rollout.credit`).
"""

from __future__ import annotations

from typing import Any

from seetjax.envs.base import EpisodeTrace, Message, StepCode, StepResult, TurnVerdict
from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.corpus import QATask
from seetjax.envs.qa_search.reward import RewardParts, exact_match, qa_reward
from seetjax.tools import prompts
from seetjax.tools.calls import ParseError, ToolCall, parse_tool_calls
from seetjax.tools.schema import ToolSchema

COORDINATOR_ROLE = "You are the coordinator of a team of search agents. "
WORKER_ROLE = ("You are a worker in a team of search agents: answer the coordinator's "
               "sub-question. ")
TOOL_DOCS = [
    {"name": "delegate",
     "description": "Asks a worker agent one sub-question; it searches and answers it.",
     "parameters": {"type": "dict", "properties": {
         "question": {"type": "string", "description": "A simpler question, one hop."}},
         "required": ["question"]}},
    {"name": "answer",
     "description": "Gives the team's final answer and ends the episode.",
     "parameters": {"type": "dict", "properties": {
         "text": {"type": "string", "description": "The answer, as short as possible."}},
         "required": ["text"]}},
]


def coordinator_prompt(config: QASearchConfig, max_rounds: int) -> str:
    """The coordinator's system prompt (compact style: with its tools and the call format)."""
    intro = (f"{COORDINATOR_ROLE}Split the user's question into simpler sub-questions, one hop "
             f"each; delegate(question) asks a worker one of them and shows its answer. You have "
             f"{max_rounds} replies: delegate one sub-question per reply, then give the final "
             "answer with answer(text=...).")
    if config.prompt_style == "native":
        return intro
    return f"{intro}\n\n{prompts.compact_system_prompt(TOOL_DOCS, config.call_format)}"


class CoordinatorEnv:
    """One coordinator episode at a time (see the module docstring)."""

    def __init__(self, config: QASearchConfig, max_rounds: int):
        self.config, self.max_rounds = config, max_rounds
        self._schemas = {d["name"]: ToolSchema.from_doc(d) for d in TOOL_DOCS}
        self._system = coordinator_prompt(config, max_rounds)
        self.credit: dict[str, float] | None = None

    def reset(self, task: QATask) -> list[Message]:
        self.task = task
        self._steps: list[StepResult] = []
        self._verdicts: list[TurnVerdict] = []
        self._delivered: tuple[str | None] | None = None  # the pending worker answer, boxed
        self.delegations: list[str] = []
        self.worker_searches = 0
        self.answered: str | None = None
        self.format_errors = 0
        self.answer_call = self.timeout = self.done = False
        self.credit = None
        return [{"role": "system", "content": self._system},
                {"role": "user", "content": task.question}]

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return prompts.native_tools(TOOL_DOCS) if self.config.prompt_style == "native" else None

    @property
    def call_format(self) -> str:
        return self.config.call_format

    def parse_calls(self, text: str) -> list[ToolCall] | ParseError:
        return parse_tool_calls(text, self.config.call_format, self._schemas,
                                self.config.max_message_chars)

    def delegation(self, text: str) -> str | None:
        """The sub-question the reply `text` delegates, if stepping it would run a worker."""
        calls = self.parse_calls(text)
        if self.done or not isinstance(calls, list) or len(calls) != 1:
            return None
        question = calls[0].args.get("question")
        last_round = len(self._steps) + 1 >= self.max_rounds
        ok = calls[0].name == "delegate" and isinstance(question, str) and question.strip()
        return question if ok and not last_round else None

    def deliver(self, answer: str | None, searches: int) -> None:
        """The worker's answer to the pending delegation (None: it gave none) and its searches."""
        self._delivered = (answer,)
        self.worker_searches += searches

    def step(self, assistant_text: str, format_error_ends_turn: bool | None = None) -> StepResult:
        if self.done:
            raise RuntimeError("the episode is over: call reset(task) to start another")
        question = self.delegation(assistant_text)
        calls = self.parse_calls(assistant_text)
        if question is not None:
            if self._delivered is None:
                raise RuntimeError("deliver() the worker's answer before stepping a delegation")
            self.delegations.append(question)
            (answer,), self._delivered = self._delivered, None
            shown = "The worker gave no answer." if answer is None else f"Worker: {answer}"
            return self._record(StepResult(0, StepCode.CLEAN_CALL, (
                {"role": "tool", "name": "delegate", "content": shown},), tuple(calls)))
        if isinstance(calls, list) and not calls:
            return self._end(StepCode.NO_CALL, assistant_text, ())
        if isinstance(calls, list) and len(calls) == 1 and calls[0].name == "answer" and \
                isinstance(calls[0].args.get("text"), str):
            self.answer_call = True
            return self._end(StepCode.CLEAN_CALL, calls[0].args["text"], tuple(calls))
        if len(self._steps) + 1 >= self.max_rounds:  # the round cap: no reply left to answer
            self.timeout = True
            return self._end(StepCode.EXECUTION_ERROR, None,
                             tuple(calls) if isinstance(calls, list) else ())
        self.format_errors += 1
        error = (str(calls) if isinstance(calls, ParseError) else
                 "one call per reply: delegate(question='...') or answer(text='...')")
        return self._record(StepResult(
            0, StepCode.FORMAT_ERROR, ({"role": "tool", "content": f"Error: {error}"},),
            tuple(calls) if isinstance(calls, list) else (),
            parse_error=calls if isinstance(calls, ParseError) else None))

    def trace(self) -> EpisodeTrace:
        return EpisodeTrace(self.task.id, tuple(self._steps), tuple(self._verdicts), ((),))

    def team_reward(self, truncated: bool = False) -> RewardParts:
        """The QA reward of the team's answer; the searches are all its workers' searches."""
        return qa_reward(self.answered, self.task.answers, self.worker_searches,
                         format_ok=self.answer_call and not self.format_errors,
                         timeout=self.timeout or truncated, weights=self.config.weights)

    def episode_reward(self, truncated: bool) -> dict[str, float]:
        """`capabilities.ScoresEpisodes`: the credit the rollout gave the episode."""
        if self.credit is None:
            raise RuntimeError("the team's credit is not assigned yet")
        return dict(self.credit)

    def _end(self, code: StepCode, answer: str | None, calls: tuple[ToolCall, ...]) -> StepResult:
        self.answered, self.done = answer, True
        passed = answer is not None and bool(exact_match(answer, self.task.answers))
        verdict = TurnVerdict(0, passed, True, None if passed else "qa_search:wrong_answer")
        return self._record(StepResult(0, code, (), calls, verdicts=(verdict,),
                                       timeout=self.timeout, done=True))

    def _record(self, result: StepResult) -> StepResult:
        self._steps.append(result)
        self._verdicts.extend(result.verdicts)
        return result
