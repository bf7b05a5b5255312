"""One scenario from prompt to outcome: teacher attempt, validation, review, refinement rounds.

Round 0 plays the scenario; its trace is validated, then (with `review_flow.enabled`) scored by a
reviewer. A trace is accepted when it is valid and, if reviewed, scores at least
`review_flow.min_score` without asking for revision. Otherwise, while refinement rounds remain
(`review_flow.max_rounds`), the teacher plays the scenario again from the start with the
reviewer's feedback (and, with `refine_on_validation`, the failed checks) in its system prompt.
Every round is recorded in `metadata.generation.review_rounds`. A rejected trace keeps its record
and a reason: the first failed required validator, `review` (score too low), `review_unparsed`,
`reviewer_failed` or `teacher_failed`.
"""

from __future__ import annotations

import json

from seetjax.distill.config import DistillConfig
from seetjax.distill.episode import Attempt, play
from seetjax.distill.pools import Pool, PoolExhausted
from seetjax.distill.prompts import system_prompt
from seetjax.distill.records import (
    Generation,
    Metadata,
    Outcome,
    Record,
    ReviewRound,
    TeacherInfo,
    tool_docs,
)
from seetjax.distill.review import ReviewUnparsed, review
from seetjax.distill.scenarios import Scenario
from seetjax.distill.validators import Validation, language_info, validate

FLOW_REASONS = ("review", "review_unparsed", "reviewer_failed", "teacher_failed")


class OutOfBudget(Exception):
    """The scenario could not finish for lack of budget: it stays undone for a later run."""


def record_of(attempt: Attempt, validation: Validation, rounds: list[ReviewRound],
              score: float, config: DistillConfig) -> Record:
    scenario, endpoint = attempt.scenario, attempt.endpoint
    sampling = endpoint.sampling.model_dump(mode="json")
    return Record(
        id=scenario.id, turns=attempt.turns, tools=tool_docs(attempt.tools),
        metadata=Metadata(
            scenario_id=scenario.id, scenario_type=scenario.family,
            difficulty=scenario.difficulty, task_id=scenario.task.id, score=score,
            validation_score=validation.score, reflection_passes=attempt.reflection_passes,
            language_policy=language_info(attempt, config),
            validation_feedback=validation.feedback(),
            prompt_tokens=attempt.prompt_tokens, completion_tokens=attempt.completion_tokens,
            generation=Generation(
                run_name=config.run_name, seed=config.seed,
                teacher=TeacherInfo(endpoint=endpoint.name, provider=endpoint.provider,
                                    model=endpoint.model,
                                    sampling=json.dumps(sampling, sort_keys=True)),
                review_rounds=rounds, fallbacks=attempt.fallbacks)))


def _rejected(attempt: Attempt, validation: Validation, rounds: list[ReviewRound],
              config: DistillConfig, reason: str, detail: str) -> Outcome:
    """A rejected outcome that keeps its trace (for QA) and says why."""
    return Outcome(scenario_id=attempt.scenario.id, status="rejected", reason=reason,
                   detail=detail, record=record_of(attempt, validation, rounds, validation.score,
                                                   config))


async def distill(scenario: Scenario, teachers: Pool, reviewers: Pool | None,
                  config: DistillConfig) -> Outcome:
    """The scenario's outcome (see the module docstring); raises OutOfBudget."""
    flow = config.review_flow
    rounds_left = flow.max_rounds if flow.enabled else 0
    feedback: list[str] = []
    rounds: list[ReviewRound] = []
    for number in range(rounds_left + 1):
        last = number == rounds_left
        attempt = await play(scenario, system_prompt(config, scenario, feedback), teachers,
                             config)
        if attempt.failure:
            if attempt.budget:
                raise OutOfBudget(attempt.failure)
            return Outcome(scenario_id=scenario.id, status="rejected", reason="teacher_failed",
                           detail=attempt.failure)
        validation = validate(attempt, config)
        current = ReviewRound(round=number, teacher_endpoint=attempt.endpoint.name,
                              validation_passed=validation.passed,
                              validation_feedback=validation.feedback())
        rounds.append(current)
        if not validation.passed:
            if not last and flow.refine_on_validation:
                feedback = validation.feedback()
                continue
            failed = next(c for c in validation.failures()
                          if c.name in config.validation.required)
            return _rejected(attempt, validation, rounds, config, failed.name, failed.detail)
        if reviewers is None:
            return Outcome(scenario_id=scenario.id, status="accepted",
                           record=record_of(attempt, validation, rounds, validation.score,
                                            config))
        try:
            verdict, reply = await review(reviewers, scenario, attempt.turns, config, number)
        except ReviewUnparsed as e:
            return _rejected(attempt, validation, rounds, config, "review_unparsed", str(e))
        except PoolExhausted as e:
            if e.budget:
                raise OutOfBudget(str(e)) from None
            return _rejected(attempt, validation, rounds, config, "reviewer_failed", str(e))
        rounds[-1] = current.model_copy(update={
            "reviewer_endpoint": reply.endpoint.name, "reviewer_model": reply.endpoint.model,
            "score": verdict.score, "needs_revision": verdict.needs_revision,
            "feedback": verdict.feedback, "chinese_summary": verdict.chinese_summary})
        good = verdict.score >= flow.min_score
        if good and (not verdict.needs_revision or last):
            return Outcome(scenario_id=scenario.id, status="accepted",
                           record=record_of(attempt, validation, rounds, verdict.score, config))
        if last:
            return _rejected(attempt, validation, rounds, config, "review",
                             f"score {verdict.score:g} < min_score {flow.min_score:g}: "
                             f"{verdict.feedback}")
        feedback = [verdict.feedback or "The reviewer asked for a revision."]
    raise AssertionError("unreachable: the last round returns")
