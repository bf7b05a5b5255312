"""Pluggable trace validators, scored against the scenario's rubric.

Each validator reads a finished `Attempt` and says whether it passes, and why not:

- `schema`: every reply parses, and every call names an available tool with arguments that
  match its JSON schema;
- `execution`: calls run without errors (at most `validation.max_execution_errors`);
- `ground_truth`: BFCL's checker passes the episode (state and response checks per turn) where
  the scenario has ground truth;
- `tool_loops`: no call repeated more than `validation.max_repeated_calls` times in a row, and no
  turn forced to end by its step limit;
- `final_answer`: every user turn ends with a non-empty answer without calls;
- `language_policy`: the narrative (rationales and answers) is English-dominant, and a Chinese
  summary is there where the policy requires it (`seetjax.distill.language`).

The validation score is the rubric-weighted share of validators passed; a trace is valid when
every `validation.required` validator passes. `register_validator` adds more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from seetjax.distill.config import DistillConfig
from seetjax.distill.episode import Attempt
from seetjax.distill.language import is_chinese, language_mix, split_summary
from seetjax.distill.prompts import require_chinese_summary
from seetjax.distill.records import LanguageInfo
from seetjax.envs.base import StepCode
from seetjax.tools.executor import ExecutionErrorKind

_CALL_ERRORS = (ExecutionErrorKind.UNKNOWN_FUNCTION, ExecutionErrorKind.INVALID_ARGUMENTS)


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


def language_info(attempt: Attempt, config: DistillConfig) -> LanguageInfo:
    """The narrative's English share and whether its final answers carry a Chinese summary."""
    marker = config.language_policy.summary_marker
    narrative, summaries = [], []
    for turn in attempt.turns:
        if turn.role == "assistant" and turn.content:
            text, summary = split_summary(turn.content, marker)
            narrative.append(text)
            if turn.kind == "final_answer":
                summaries.append(summary)
    present = bool(summaries) and all(is_chinese(s) for s in summaries)
    return LanguageInfo(require_chinese_summary=require_chinese_summary(config, attempt.scenario),
                        english_share=round(language_mix(narrative).english_share, 4),
                        chinese_summary_present=present)


@register_validator("language_policy")
def _language_policy(attempt: Attempt, config: DistillConfig) -> Check:
    info = language_info(attempt, config)
    if info.english_share < config.language_policy.english_min_share:
        return Check("language_policy", False, f"the narrative is {info.english_share:.0%} "
                                               "English")
    if info.require_chinese_summary and not info.chinese_summary_present:
        return Check("language_policy", False, "a final answer lacks its Chinese summary "
                                               f"({config.language_policy.summary_marker}...)")
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
