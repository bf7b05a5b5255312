"""Multi-hop question answering with a search tool, as a ToolEnv (`seetjax.envs.base`).

An episode is one question, one user turn. The agent acts with tool calls, read as BFCL's
environment reads them (`seetjax.tools.calls`: python `[search(query='...')]` for the compact
prompt style, `<tool_call>` blocks for the native one) and run by a `ToolExecutor` on the
episode's `SearchTools`, so arguments are validated against the tools' schemas:

* `search(query, k=default_k)`: the k best chunks of the corpus (`PassageRetriever`), each with
  its provenance (doc id, title, score) and snippet; k outside [1, max_k] or an empty query is an
  execution error. The episode may run `search_budget` searches; a search call past it is not run
  and ends the episode as a timeout (the reward's timeout penalty).
* `answer(text)`: ends the episode; the answer is scored (`reward.qa_reward`) and the verdict
  passes on an exact match. Calls after it in the same reply are not run.

A reply whose calls cannot be parsed gets a FORMAT_ERROR observation (`Error: ...`, as BFCL's
environment answers one) and the episode goes on, unless `format_error_ends_episode` (or the
step's `format_error_ends_turn`) says it ends. A reply without calls ends the episode with its
text read as the answer, without the format credit `answer(...)` earns. A reply that would keep
the episode open after `max_steps` replies ends it as a timeout instead (its calls have run, as
in BFCL's step limit). Observations of a search may have a share of their words
masked (`retrieval_mask_ratio`, `seetjax.envs.qa_search.masking`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from seetjax.envs.base import EpisodeTrace, Message, StepCode, StepResult, TurnVerdict
from seetjax.envs.qa_search.config import QASearchConfig
from seetjax.envs.qa_search.corpus import Passage, QATask
from seetjax.envs.qa_search.masking import mask_rng, mask_words
from seetjax.envs.qa_search.retriever import PassageRetriever
from seetjax.envs.qa_search.reward import RewardParts, exact_match, qa_reward
from seetjax.tools import prompts
from seetjax.tools.calls import ParseError, ToolCall, parse_tool_calls
from seetjax.tools.executor import ExecutionResult, ToolExecutor
from seetjax.tools.schema import ToolSchema

_TOOL_CLASS = "SearchTools"
# error_type of failed verdicts, in bfcl_eval's "category:reason" style.
WRONG_ANSWER = "qa_search:wrong_answer"
FORMAT_ERROR = "qa_search:format_error"
BUDGET_EXCEEDED = "qa_search:search_budget_exceeded"
STEP_LIMIT = "qa_search:step_limit"


def tool_docs(config: QASearchConfig) -> list[dict[str, Any]]:
    """The JSON function docs of `search` and `answer` (k's bounds from the config)."""
    return [
        {"name": "search",
         "description": "Searches the document collection and returns the best passages, each "
                        "with its doc id, title and score.",
         "parameters": {"type": "dict", "properties": {
             "query": {"type": "string", "description": "What to look for."},
             "k": {"type": "integer", "description": "How many passages to return.",
                   "default": config.default_k, "minimum": 1, "maximum": config.max_k}},
             "required": ["query"]}},
        {"name": "answer",
         "description": "Gives the final answer to the question and ends the episode.",
         "parameters": {"type": "dict", "properties": {
             "text": {"type": "string", "description": "The answer: a name, a number or a few "
                                                     "words."}},
             "required": ["text"]}},
    ]


def system_prompt(config: QASearchConfig, role: str = "") -> str:
    """`role` (an agent's role in a team, if any), the task's instructions, then (compact style)
    the tools and the call format (`prompts.compact_system_prompt`); the native style shows
    tools through the chat template."""
    intro = role + (f"Answer the user's question from a document collection. search(query, k) returns "
             f"passages; you may search at most {config.search_budget} times. A question may need "
             "several searches, each built on what the last one found. Give the final answer "
             "with answer(text=...), as short as possible: a name, a year or a few words.")
    if config.prompt_style == "native":
        return intro
    return f"{intro}\n\n{prompts.compact_system_prompt(tool_docs(config), config.call_format)}"


def gold_calls(task: QATask, spaced_answer: bool = False) -> tuple[ToolCall, ...]:
    """The oracle's calls: each hop's sub-question as a search, then the last hop's answer
    (`spaced_answer`: after a space, see `QASearchConfig.oracle_spaced_answer`)."""
    answer = task.hops[-1].answer if task.hops else task.answers[0]
    return (*(ToolCall("search", {"query": hop.question}) for hop in task.hops),
            ToolCall("answer", {"text": f" {answer}" if spaced_answer else answer}))


class SearchTools:
    """The episode's tool instance: runs searches, counts them, keeps the answer."""

    def __init__(self, retriever: PassageRetriever, config: QASearchConfig, task_id: str):
        self._retriever, self._config, self._task_id = retriever, config, task_id
        self.searches = 0
        self.answered: str | None = None

    def search(self, query: str, k: int | None = None) -> str:
        hits = self._retriever.search(query, self._config.default_k if k is None else k)
        self.searches += 1
        snippets = [" ".join(hit.chunk.text.split()[:self._config.snippet_words]) for hit in hits]
        if self._config.retrieval_mask_ratio:
            snippets = mask_words(snippets, self._config.retrieval_mask_ratio,
                                  mask_rng(self._config.mask_seed, self._task_id, self.searches))
        lines = [f"Search {self.searches} of {self._config.search_budget}: {len(hits)} "
                 f"passages for {query!r}."]
        for rank, (hit, snippet) in enumerate(zip(hits, snippets), 1):
            lines.append(f"[{rank}] {hit.chunk.title} (doc {hit.passage_id}, score "
                         f"{hit.score:.4g})\n{snippet}")
        return "\n".join(lines)

    def answer(self, text: str) -> str:
        self.answered = text
        return "Answer recorded."


class QASearchEnv:
    """One QA search episode at a time (see the module docstring and `ToolEnv`). The retriever
    is shared by every episode: build it once (`PassageRetriever(passages, config.retrieval)`,
    or `from_passages`). `role` opens the system prompt (a worker's, `seetjax.rollout.multi_agent`)."""

    def __init__(self, retriever: PassageRetriever, config: QASearchConfig | None = None,
                 role: str = ""):
        self.config = config or QASearchConfig()
        self.retriever = retriever
        self._docs = tool_docs(self.config)
        self._schemas = {d["name"]: ToolSchema.from_doc(d) for d in self._docs}
        self._system = system_prompt(self.config, role)
        self._task: QATask | None = None
        self.done = False

    @classmethod
    def from_passages(cls, passages: Iterable[Passage], config: QASearchConfig | None = None
                      ) -> QASearchEnv:
        config = config or QASearchConfig()
        return cls(PassageRetriever(passages, config.retrieval), config)

    # ------------------------------------------------------------------ protocol

    def reset(self, task: QATask) -> list[Message]:
        self._task = task
        self.search_tools = SearchTools(self.retriever, self.config, task.id)
        self.executor = ToolExecutor({_TOOL_CLASS: self.search_tools},
                                     {_TOOL_CLASS: list(self._schemas.values())})
        self._steps: list[StepResult] = []
        self._verdicts: list[TurnVerdict] = []
        self._format_errors = 0
        self._answer_call = False  # the episode ended through a successful answer(...) call
        self.timeout, self.done = False, False
        opening = [{"role": "system", "content": self._system},
                   {"role": "user", "content": task.question}]
        self.history: list[Message] = [dict(m) for m in opening]
        return opening

    def step(self, assistant_text: str, format_error_ends_turn: bool | None = None) -> StepResult:
        """Reads one reply. `format_error_ends_turn` overrides `format_error_ends_episode` for
        this reply (SEET's fast loop decides per reply whether a format error is retried)."""
        if self.done:
            raise RuntimeError("the episode is over: call reset(task) to start another")
        self._require_task()
        self.history.append({"role": "assistant", "content": assistant_text})
        parsed = self.parse_calls(assistant_text)
        if isinstance(parsed, ParseError):
            self._format_errors += 1
            ends = (self.config.format_error_ends_episode if format_error_ends_turn is None
                    else format_error_ends_turn)
            if ends:
                return self._record(self._end(StepCode.FORMAT_ERROR, False, FORMAT_ERROR,
                                              str(parsed), parse_error=parsed))
            return self._record(self._continue(
                StepCode.FORMAT_ERROR, ({"role": "tool", "content": f"Error: {parsed}"},),
                parse_error=parsed))
        if not parsed:
            return self._record(self._judge(StepCode.NO_CALL, assistant_text))
        results: list[ExecutionResult] = []
        for call in parsed:
            if call.name == "search" and self.search_tools.searches >= self.config.search_budget:
                return self._record(self._end(
                    _code(results), False, BUDGET_EXCEEDED,
                    f"a search past the budget of {self.config.search_budget}",
                    calls=tuple(parsed), results=tuple(results), timeout=True))
            results.append(self.executor.execute(call))
            if call.name == "answer" and results[-1].ok:
                self._answer_call = True
                return self._record(self._judge(_code(results), self.search_tools.answered,
                                                tuple(parsed), tuple(results)))
        observations = tuple({"role": "tool", "name": r.call.name, "content": r.output}
                             for r in results)
        return self._record(self._continue(_code(results), observations, tuple(parsed),
                                           tuple(results)))

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """Native tool entries (prompt_style "native" only)."""
        return prompts.native_tools(self._docs) if self.config.prompt_style == "native" else None

    def trace(self) -> EpisodeTrace:
        task = self._require_task()
        return EpisodeTrace(task.id, tuple(self._steps), tuple(self._verdicts),
                            (gold_calls(task, self.config.oracle_spaced_answer),))

    # ------------------------------------------------------------------ extras

    @property
    def task(self) -> QATask:
        return self._require_task()

    @property
    def answered(self) -> str | None:
        """The text of the episode's answer call as the policy wrote it (None: no answer)."""
        return self.search_tools.answered

    @property
    def call_format(self) -> str:
        return self.config.call_format

    @property
    def schemas(self) -> Mapping[str, ToolSchema]:
        return self._schemas

    def parse_calls(self, text: str) -> list[ToolCall] | ParseError:
        """The calls of `text`, read exactly as `step` reads them."""
        return parse_tool_calls(text, self.config.call_format, self._schemas,
                                self.config.max_message_chars)

    def reward(self) -> RewardParts:
        """The episode's reward, part by part (`reward.qa_reward`); the episode must be over."""
        if not self.done:
            raise RuntimeError("the episode is not over yet")
        return self._reward(self.timeout)

    def episode_reward(self, truncated: bool) -> dict[str, float]:
        """`capabilities.ScoresEpisodes`: `reward()`'s parts and total; an episode the rollout
        cut off (`truncated`) is scored as a timeout."""
        if not (self.done or truncated):
            raise RuntimeError("the episode is not over yet")
        return self._reward(self.timeout or truncated).as_dict()

    def snapshot(self) -> dict[str, Any]:
        """A copy of the episode so far; `restore` returns to it (SEET's fast loop retries a
        failed step from the state before it)."""
        return copy.deepcopy({
            "steps": self._steps, "verdicts": self._verdicts, "history": self.history,
            "format_errors": self._format_errors, "answer_call": self._answer_call,
            "timeout": self.timeout, "done": self.done,
            "searches": self.search_tools.searches, "answered": self.search_tools.answered})

    def state_view(self) -> dict[str, Any]:
        """The state GiGPO groups steps by (`seetjax.envs.state_keys`): what the reward reads
        (searches, the answer, a format error yet, how the episode ended) and the tool outputs
        so far as a multiset (what the policy has found); not their order."""
        return {"searches": self.search_tools.searches, "answered": self.search_tools.answered,
                "format_error": bool(self._format_errors), "answer_call": self._answer_call,
                "timeout": self.timeout, "done": self.done,
                "outputs": Counter(r.output for s in self._steps for r in s.results)}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        state = copy.deepcopy(dict(snapshot))
        self._steps, self._verdicts, self.history = (state["steps"], state["verdicts"],
                                                     state["history"])
        self._format_errors, self._answer_call = state["format_errors"], state["answer_call"]
        self.timeout, self.done = state["timeout"], state["done"]
        self.search_tools.searches = state["searches"]
        self.search_tools.answered = state["answered"]

    # ------------------------------------------------------------------ internals

    def _reward(self, timeout: bool) -> RewardParts:
        return qa_reward(self.search_tools.answered, self.task.answers,
                         self.search_tools.searches,
                         format_ok=self._answer_call and not self._format_errors,
                         timeout=timeout, weights=self.config.weights)

    def _continue(self, code: StepCode, observations: tuple[Message, ...],
                  calls: tuple[ToolCall, ...] = (), results: tuple[ExecutionResult, ...] = (),
                  parse_error: ParseError | None = None) -> StepResult:
        """A step that keeps the episode open, unless it is one reply too many."""
        if len(self._steps) < self.config.max_steps:
            return StepResult(0, code, observations, calls, results, parse_error)
        return self._end(code, False, STEP_LIMIT, f"more than {self.config.max_steps} replies",
                         calls, results, parse_error, timeout=True)

    def _judge(self, code: StepCode, answer: str | None, calls: tuple[ToolCall, ...] = (),
               results: tuple[ExecutionResult, ...] = ()) -> StepResult:
        """Ends the episode on `answer` (a reply's plain text, or an answer call's text)."""
        task = self._require_task()
        self.search_tools.answered = answer
        passed = bool(exact_match(answer, task.answers))
        return self._end(code, passed, None if passed else WRONG_ANSWER,
                         f"answered {answer[:200]!r}; expected {task.answers[0]!r}",
                         calls=calls, results=results)

    def _end(self, code: StepCode, passed: bool, error_type: str | None, message: str,
             calls: tuple[ToolCall, ...] = (), results: tuple[ExecutionResult, ...] = (),
             parse_error: ParseError | None = None, timeout: bool = False) -> StepResult:
        self.done, self.timeout = True, timeout
        verdict = TurnVerdict(0, passed, True, error_type, message)
        return StepResult(0, code, (), calls, results, parse_error, (verdict,), timeout=timeout,
                          done=True)

    def _record(self, result: StepResult) -> StepResult:
        self._steps.append(result)
        self._verdicts.extend(result.verdicts)
        self.history.extend(result.observations)
        return result

    def _require_task(self) -> QATask:
        if self._task is None:
            raise RuntimeError("no episode in progress: call reset(task) first")
        return self._task


def _code(results: list[ExecutionResult]) -> StepCode:
    return StepCode.CLEAN_CALL if all(r.ok for r in results) else StepCode.EXECUTION_ERROR
