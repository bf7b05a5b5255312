"""EnvTuning's episode rewards (Lu et al., 2025, "Don't Just Fine-tune the Agent, Tune the
Environment", arXiv:2510.10197), computed from its per-step code sequence.

EnvTuning records one code per environment answer: -3 for a message that could not be parsed,
-2 for a tool call that failed, -1 for a clean tool call, and 1 or 0 for a turn that passed or
failed the checker. With `codes` that sequence:

    progress = #{1} / turns of the task          (the reward)
    format   = (len(codes) - #{-3}) / len(codes)
    tool_call = #{-1} / #{-1, -2}                (0 when no call was made)

Progress divides by the task's turns, not by the turns judged: the two agree whenever the
environment ended the episode (it judges every turn, a force-termination failing the rest), and a
turn the episode never reached, because the rollout cut it off when its context was full, counts
as failed (an episode cut after passing turn 0 of 4 scores 0.25, not 1.0). This is the reward the
trainer optimises: `seetjax.rollout.episode.Episode.progress_reward` calls `progress_reward` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from seetjax.envs.base import EpisodeTrace, StepCode


def step_codes(trace: EpisodeTrace) -> list[int]:
    """EnvTuning's code sequence: each message's code (plain answers have none), followed by
    1 or 0 for every turn the message ended."""
    codes = []
    for step in trace.steps:
        if step.code != StepCode.NO_CALL:
            codes.append(int(step.code))
        codes.extend(int(v.passed) for v in step.verdicts)
    return codes


def passed_turns(trace: EpisodeTrace) -> int:
    """Turns the checker passed (a turn never reached has no verdict: it did not pass)."""
    return sum(v.passed for v in trace.verdicts)


def progress_reward(trace: EpisodeTrace) -> float:
    """Passed turns / turns of the task; unreached turns count as failed (0 for a task without
    turns)."""
    return passed_turns(trace) / trace.num_turns if trace.num_turns else 0.0


def format_reward(trace: EpisodeTrace) -> float:
    """Share of codes that are not format errors (0 for an empty episode)."""
    codes = step_codes(trace)
    return (len(codes) - codes.count(StepCode.FORMAT_ERROR)) / len(codes) if codes else 0.0


@dataclass(frozen=True)
class EnvTuningScores:
    progress: float
    format: float
    tool_call: float
    made_tool_calls: bool


def envtuning_scores(trace: EpisodeTrace) -> EnvTuningScores:
    """All of EnvTuning's episode scores; `progress` is the one it trains on."""
    codes = step_codes(trace)
    clean, failed = codes.count(StepCode.CLEAN_CALL), codes.count(StepCode.EXECUTION_ERROR)
    return EnvTuningScores(progress=progress_reward(trace), format=format_reward(trace),
                           tool_call=clean / (clean + failed) if clean + failed else 0.0,
                           made_tool_calls=clean + failed > 0)
