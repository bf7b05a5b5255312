"""Pluggable trace validators, scored against the scenario's rubric.

Each validator reads a finished `Attempt` and says whether it passes, and why not:

- `schema`: every reply parses, and every call names an available tool with arguments that
  match its JSON schema;
- `execution`: calls run without errors (at most `validation.max_execution_errors`);
- `ground_truth`: BFCL's checker passes the episode (state and response checks per turn) where
  the scenario has ground truth;
- `tool_loops`: no call repeated more than `validation.max_repeated_calls` times in a row, and no
  turn forced to end by its step limit;
- `truncated`: no teacher reply was cut by its length limit (`finish_reason` "length");
- `final_answer`: every user turn ends with a non-empty answer without calls;
- `answer_length`: no final answer is longer than `validation.max_answer_chars`;
- `faithfulness`: no final answer names a tool of the scenario that the episode has not called
  by then (a deterministic check, whatever the reviewer says). Names with an underscore, a
  digit or a capital (`get_account`) count wherever they stand as a word; names that may be
  plain words (`find`, `sort`, `ls`) only when written as code (`` `find` ``, `find(...)`).
  Any mention counts, "no need for cancel_booking" too: training answers say what was done;
- `language_policy`: each message of the parts `language_policy.english_parts` names
  (rationales, final answers without their summary line) is English-dominant on its own, so a
  foreign message cannot hide in a mostly English record; and a Chinese summary is there where
  the policy requires it (`seetjax.distill.language`).

The validation score is the rubric-weighted share of validators passed; a trace is valid when
every `validation.required` validator passes. `register_validator` adds more.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Iterator

from seetjax.distill.config import DistillConfig
from seetjax.distill.episode import Attempt
from seetjax.distill.language import is_chinese, language_mix, split_summary
from seetjax.distill.prompts import require_chinese_summary
from seetjax.distill.records import LanguageInfo, Turn
from seetjax.envs.base import StepCode
from seetjax.tools.executor import ExecutionErrorKind

_CALL_ERRORS = (ExecutionErrorKind.UNKNOWN_FUNCTION, ExecutionErrorKind.INVALID_ARGUMENTS)
# The language policy's parts -> the kind of message holding each.
PART_KINDS = {"rationale": "tool_call", "final_answer": "final_answer"}
_DISTINCTIVE = re.compile(r"_|\d|.[A-Z]")  # a name unlikely to be a plain word


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""


Validator = Callable[[Attempt, DistillConfig], Check]
VALIDATORS: dict[str, Validator] = {}


def register_validator(name: str) -> Callable[[Validator], Validator]:
    def register(fn: Validator) -> Validator:
        VALIDATORS[name] = fn
        return fn
    return register


@register_validator("schema")
def _schema(attempt: Attempt, config: DistillConfig) -> Check:
    for step in attempt.trace.steps:
        if step.code == StepCode.FORMAT_ERROR:
            return Check("schema", False, f"turn {step.turn}: a reply does not parse: "
                                          f"{step.parse_error}")
        for result in step.results:
            if result.error in _CALL_ERRORS:
                return Check("schema", False, f"turn {step.turn}: {result.call}: "
                                              f"{result.output[:200]}")
    return Check("schema", True)


@register_validator("execution")
def _execution(attempt: Attempt, config: DistillConfig) -> Check:
    failed = [r for step in attempt.trace.steps for r in step.results
              if r.error is not None and r.error not in _CALL_ERRORS]
    if len(failed) > config.validation.max_execution_errors:
        return Check("execution", False, f"{len(failed)} call(s) failed, e.g. {failed[0].call}: "
                                         f"{failed[0].output[:200]}")
    return Check("execution", True)


@register_validator("ground_truth")
def _ground_truth(attempt: Attempt, config: DistillConfig) -> Check:
    if not attempt.scenario.has_ground_truth or attempt.result.valid:
        return Check("ground_truth", True)
    return Check("ground_truth", False, f"{attempt.result.error_type}: {attempt.result.message}")


@register_validator("tool_loops")
def _tool_loops(attempt: Attempt, config: DistillConfig) -> Check:
    limit = config.validation.max_repeated_calls
    previous, run = None, 0
    for step in attempt.trace.steps:
        if step.timeout:
            return Check("tool_loops", False, f"turn {step.turn} hit the step limit "
                                              f"({config.episode.max_steps_per_turn})")
        for call in step.calls:
            run = run + 1 if call == previous else 1
            previous = call
            if run > limit:
                return Check("tool_loops", False, f"{call} called {run} times in a row")
    return Check("tool_loops", True)


@register_validator("truncated")
def _truncated(attempt: Attempt, config: DistillConfig) -> Check:
    for n, reason in enumerate(attempt.finish_reasons):
        if reason == "length":
            return Check("truncated", False, f"teacher reply {n + 1} of "
                                             f"{len(attempt.finish_reasons)} was cut by its "
                                             "length limit (finish_reason 'length')")
    return Check("truncated", True)


@register_validator("final_answer")
def _final_answer(attempt: Attempt, config: DistillConfig) -> Check:
    last: dict[int, str] = {}
    for turn in attempt.turns:
        if turn.role == "assistant":
            last[turn.turn] = turn.kind if turn.content.strip() or turn.tool_calls else "empty"
    for t in range(attempt.scenario.task.num_turns):
        if last.get(t) != "final_answer":
            return Check("final_answer", False, f"turn {t} ends without a final answer "
                                                f"({last.get(t, 'no reply')})")
    return Check("final_answer", True)


@register_validator("answer_length")
def _answer_length(attempt: Attempt, config: DistillConfig) -> Check:
    limit = config.validation.max_answer_chars
    for turn in attempt.turns:
        if turn.kind == "final_answer" and len(turn.content) > limit:
            return Check("answer_length", False, f"turn {turn.turn}: the final answer has "
                                                 f"{len(turn.content)} characters, over "
                                                 f"validation.max_answer_chars={limit}")
    return Check("answer_length", True)


@functools.lru_cache(maxsize=64)
def _tool_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    distinctive = "|".join(re.escape(n) for n in names if _DISTINCTIVE.search(n))
    plain = "|".join(re.escape(n) for n in names if not _DISTINCTIVE.search(n))
    # One group per alternative: as a word, or (plain names) after a backtick or before "(".
    alternatives = ([rf"\b({distinctive})\b"] if distinctive else []) + (
        [rf"`({plain})\b", rf"\b({plain})\("] if plain else [])
    return re.compile("|".join(alternatives)) if alternatives else None


def mentioned_tools(text: str, names: Iterable[str]) -> set[str]:
    """The tool `names` that `text` names (the rule in the module docstring)."""
    pattern = _tool_pattern(tuple(sorted(set(names), key=lambda n: (-len(n), n))))
    if pattern is None:
        return set()
    return {next(name for name in m.groups() if name) for m in pattern.finditer(text)}


@register_validator("faithfulness")
def _faithfulness(attempt: Attempt, config: DistillConfig) -> Check:
    names = [doc["name"] for doc in attempt.scenario.template.tools]
    names += [tool["function"]["name"] for tool in attempt.tools]
    called: set[str] = set()
    for turn in attempt.turns:
        called.update(call.name for call in turn.tool_calls)
        if turn.kind == "final_answer":
            uncalled = mentioned_tools(turn.content, names) - called
            if uncalled:
                return Check("faithfulness", False, f"turn {turn.turn}: the final answer names "
                                                    f"{sorted(uncalled)}, never called (called: "
                                                    f"{sorted(called)})")
    return Check("faithfulness", True)


def _narrative(attempt: Attempt, marker: str) -> Iterator[tuple[Turn, str, str]]:
    """(message, its text without the summary line, the summary) of each assistant text."""
    for turn in attempt.turns:
        if turn.role == "assistant" and turn.content:
            yield turn, *split_summary(turn.content, marker)


def _summaries_present(attempt: Attempt, marker: str) -> bool:
    """Whether every final answer ends with a Chinese summary line after `marker`."""
    summaries = [summary for turn, _, summary in _narrative(attempt, marker)
                 if turn.kind == "final_answer"]
    return bool(summaries) and all(is_chinese(s) for s in summaries)


def language_info(attempt: Attempt, config: DistillConfig) -> LanguageInfo:
    """The narrative's English share and whether its final answers carry a Chinese summary."""
    marker = config.language_policy.summary_marker
    narrative = [text for _, text, _ in _narrative(attempt, marker)]
    return LanguageInfo(require_chinese_summary=require_chinese_summary(config, attempt.scenario),
                        english_share=round(language_mix(narrative).english_share, 4),
                        chinese_summary_present=_summaries_present(attempt, marker))


@register_validator("language_policy")
def _language_policy(attempt: Attempt, config: DistillConfig) -> Check:
    policy = config.language_policy
    parts = {PART_KINDS[part]: part.replace("_", " ") for part in policy.english_parts}
    for turn, text, _ in _narrative(attempt, policy.summary_marker):
        if turn.kind not in parts:
            continue
        mix = language_mix([text])
        if mix.english_share < policy.english_min_share:
            return Check("language_policy", False,
                         f"turn {turn.turn}: a {parts[turn.kind]} is {mix.english_share:.0%} "
                         f"English (mostly {mix.dominant}): {text[:80]!r}")
    if (require_chinese_summary(config, attempt.scenario)
            and not _summaries_present(attempt, policy.summary_marker)):
        return Check("language_policy", False, "a final answer lacks its Chinese summary "
                                               f"({policy.summary_marker}...)")
    return Check("language_policy", True)


@dataclasses.dataclass(frozen=True)
class Validation:
    checks: tuple[Check, ...]
    score: float
    passed: bool

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def feedback(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.failures()]


def validate(attempt: Attempt, config: DistillConfig) -> Validation:
    """Every configured validator on `attempt`, scored with the scenario's rubric."""
    rubric = attempt.scenario.template.rubric
    checks = tuple(VALIDATORS[name](attempt, config) for name in config.validation.validators)
    total = sum(rubric.get(c.name, 1.0) for c in checks)
    score = sum(rubric.get(c.name, 1.0) for c in checks if c.passed) / total if total else 1.0
    required = set(config.validation.required)
    passed = all(c.passed for c in checks if c.name in required)
    return Validation(checks, round(score, 4), passed)
