"""What tells an honest attempt at a turn from a cheap one: progress toward its ground truth.

A turn's progress is the share of its ground-truth calls the model's calls reach, argument by
argument: each ground-truth call is paired with at most one call the model made in the turn (the
same tool; the pairs that match the most arguments first), and counts the share of its arguments
that call passes with the same value (in canonical form, `ToolCall`), all of it for a call without
arguments. Calls that failed count too: an error on the way to the right call is still an attempt
at it. The cheap behaviours that do not solve a turn make none: silence, giving up with a message,
harmless calls to other tools, repeating an earlier call, the right tool with garbage arguments,
a message that does not parse. Every attempt that gets one argument right (or calls the right
tool that takes none) makes some. Progress counts a call once, so repeating it adds none; the
repeats themselves are counted by `repeated_calls` (a call equal, in canonical form, to one made
earlier in the same turn, beyond the times the turn's ground truth makes it), which the shaped
reward charges.

The rule every reward kind follows (`seetjax.rewards.shaping`, `seetjax.rewards.agent`): a turn
that expected calls and failed without progress (`unproductive_turns`) scores as silence,
whatever was called there, so no call earns anything by itself; an attempt that made progress
never scores below silence. BFCL's checker judges a turn by the state and the answers it leaves,
so a turn can pass along another route than its ground truth; a failed turn is judged by the
route its ground truth takes. `gaming_metrics` counts the unproductive turns and the repeated
calls of a rollout (the share of turns failed silent is `RolloutResult.stats()["silent_turns"]`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Sequence

from seetjax.envs.base import EpisodeTrace, StepCode, StepResult
from seetjax.tools.calls import ToolCall


def argument_match(made: ToolCall, truth: ToolCall) -> float:
    """The share of `truth`'s arguments `made` passes with the same value (1 for a call without
    arguments); 0 for another tool."""
    if made.name != truth.name:
        return 0.0
    if not truth.args:
        return 1.0
    same = sum(key in made.args
               and ToolCall(truth.name, {key: made.args[key]}) == ToolCall(truth.name, {key: value})
               for key, value in truth.args.items())
    return same / len(truth.args)


def matched_calls(made: Sequence[ToolCall], truth: Sequence[ToolCall]) -> float:
    """How many of `truth`'s calls `made` reaches: the sum of `argument_match` over pairs of a
    made and a ground-truth call, each call in one pair at most, the best-matching pairs first."""
    pairs = sorted(((argument_match(m, t), i, j) for i, m in enumerate(made)
                    for j, t in enumerate(truth)), reverse=True)
    paired_made, paired_truth, total = set(), set(), 0.0
    for score, i, j in pairs:
        if score > 0 and i not in paired_made and j not in paired_truth:
            paired_made.add(i)
            paired_truth.add(j)
            total += score
    return total


def turn_progress(trace: EpisodeTrace) -> list[float]:
    """Each turn's progress toward its ground truth (the module docstring), in [0, 1]; 0 for a
    turn whose ground truth makes no call (there is nothing to progress toward)."""
    return [matched_calls(made, truth) / len(truth) if truth else 0.0
            for made, truth in zip(trace.calls_per_turn(), trace.ground_truth)]


def failed_attempts(trace: EpisodeTrace) -> dict[int, float]:
    """The reached turns that expected calls and failed, each with its progress. A turn a timeout
    skipped, or one the rollout never reached, is not among them."""
    reached = {step.turn for step in trace.steps}
    progress = turn_progress(trace)
    return {v.turn: progress[v.turn] for v in trace.verdicts
            if v.checked and not v.passed and trace.ground_truth[v.turn] and v.turn in reached}


def unproductive_turns(trace: EpisodeTrace) -> set[int]:
    """The reached turns that expected calls and failed without progress toward their ground
    truth: silent ones (`EpisodeTrace.unattempted_turns`) and ones whose calls made none."""
    return {turn for turn, progress in failed_attempts(trace).items() if progress == 0}


def repeated_calls(trace: EpisodeTrace) -> list[int]:
    """Per step, how many of its calls repeat a call made earlier in the same turn (`ToolCall`
    equality: canonical form), beyond the times the turn's ground truth makes that call; failed
    calls count (the environment is deterministic: the same call fails the same way)."""
    made: dict[int, Counter] = {}
    out = []
    for step in trace.steps:
        seen = made.setdefault(step.turn, Counter())
        allowed = Counter(trace.ground_truth[step.turn])
        repeats = 0
        for call in step.calls:
            repeats += seen[call] >= max(allowed[call], 1)
            seen[call] += 1
        out.append(repeats)
    return out


def silenced(trace: EpisodeTrace, turns: Collection[int]) -> EpisodeTrace:
    """`trace` as if each of `turns` (failed turns) had been one plain answer that gave up: its
    messages are replaced by one without calls that ends the turn with the same verdicts (and the
    same timeout, if the turn ran into one)."""
    if not turns:
        return trace
    steps = []
    for step in trace.steps:
        if step.turn not in turns:
            steps.append(step)
        elif step.turn_ended:
            steps.append(StepResult(step.turn, StepCode.NO_CALL, (), verdicts=step.verdicts,
                                    timeout=step.timeout, done=step.done))
    return dataclasses.replace(trace, steps=tuple(steps))


def gaming_metrics(traces: Sequence[EpisodeTrace]) -> dict[str, float]:
    """The reward-hack detectors over a rollout: `unproductive_turns`, the share of the turns that
    expect calls which failed after attempts that made no progress (irrelevant or repeated calls,
    garbage arguments, unparsable messages; silent turns are counted apart, as `silent_turns`);
    `repeated_calls`, the share of the calls made that repeat one made earlier in their turn
    (`repeated_calls`), every turn counted, those without ground-truth calls too."""
    expected = sum(bool(truth) for trace in traces for truth in trace.ground_truth)
    unproductive = sum(len(unproductive_turns(trace) - trace.unattempted_turns())
                       for trace in traces)
    made = sum(len(step.calls) for trace in traces for step in trace.steps)
    repeats = sum(sum(repeated_calls(trace)) for trace in traces)
    return {"unproductive_turns": unproductive / expected if expected else 0.0,
            "repeated_calls": repeats / made if made else 0.0}
