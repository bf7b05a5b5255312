"""The five-component agent reward with penalties.

    reward = w_c * completion + w_t * tool_accuracy + w_e * efficiency + w_m * timing + w_f * format
             - p_wrong * #wrong_tool - p_redundant * #redundant - p_format * #format_errors
             - p_timeout * [ended early]                            clipped below at `min_reward`

Every component is in [0, 1]; turns the episode never reached (it was cut off) count as failed:

* completion: passed turns / turns of the task (`completion_mode="turns"`, EnvTuning's progress,
  the same function as the trained reward), or 1 when the whole entry passes BFCL's check
  (`"entry"`; an unreached turn fails the entry);
* tool_accuracy: F1 of the calls made against the ground truth's, per turn, pooled over turns: a
  hit is a call of the right tool, weighted by the share of the ground-truth call's arguments it
  gets right (`seetjax.rewards.gaming.matched_calls`: the right tool with garbage arguments is no
  hit), 1 when neither side calls anything, `unexpected_call_accuracy` = 0.5 when the ground truth
  calls nothing but the model does;
* efficiency: ground-truth calls / calls made, capped at 1 (too few calls are the business of
  completion and tool accuracy, not of efficiency);
* timing: share of the task's turns where the model called tools exactly when the ground truth
  does (acting on a request; making no call when a tool or a value is missing); an unreached turn
  is not timed right;
* format: share of messages that parsed.

Penalties count events: a call to a tool that is not among its turn's targets, an exact repeat of
a call that already succeeded in the same turn (beyond the repeats the ground truth makes), an
unparsable message, and an episode that did not end normally (once): force-terminated by the
environment (`StepResult.timeout`) or cut off by the rollout when its context was full
(`EpisodeTrace.truncated`). Weights need not sum to 1; the defaults (the design's: completion
0.4, tool accuracy 0.25, efficiency 0.15, timing 0.10, format 0.1) do, so a perfect episode
scores 1.

Tested against gaming (`seetjax.rewards.gaming`): a turn that expected calls and failed without
progress toward its ground truth is scored as if the model had given up there in one plain
answer, whatever it called; one that made progress is scored as played or as such an answer,
whichever scores the episode higher (the best over the subsets of those turns: 2^k scorings for k
of them, at most 7 on BFCL's tasks). So no cheap behaviour (silence, harmless or repeated calls,
the right tool with garbage arguments, giving up) scores above an honest attempt at the same
turn. Before 2026-11-27 a silent episode scored 0.25 (efficiency and format for free), above
episodes whose failed attempts paid wrong-tool or error penalties. `AgentReward.components` and
`penalties` are those of the episode as scored, `silenced` the turns scored as given up.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, fields

from seetjax.envs.base import EpisodeTrace, StepCode
from seetjax.envs.bfcl.checker import first_failure
from seetjax.errors import invalid
from seetjax.rewards.envtuning import progress_reward
from seetjax.rewards.gaming import failed_attempts, matched_calls, silenced


@dataclass(frozen=True)
class AgentRewardConfig:
    completion_weight: float = 0.4
    tool_accuracy_weight: float = 0.25
    efficiency_weight: float = 0.15
    timing_weight: float = 0.10
    format_weight: float = 0.1
    completion_mode: str = "turns"  # "turns" or "entry"
    unexpected_call_accuracy: float = 0.5  # tool accuracy when no call was expected but one made
    wrong_tool_penalty: float = 0.3
    redundant_call_penalty: float = 0.2
    format_error_penalty: float = 0.1
    timeout_penalty: float = 0.5
    min_reward: float = -1.0

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "completion_mode" and not (isinstance(value, (int, float))
                                                    and math.isfinite(value)):
                raise invalid(self, f.name, value, "must be a finite number")
        if self.completion_mode not in ("turns", "entry"):
            raise invalid(self, "completion_mode", self.completion_mode, "one of 'turns', 'entry'")
        if not 0.0 <= self.unexpected_call_accuracy <= 1.0:
            raise invalid(self, "unexpected_call_accuracy", self.unexpected_call_accuracy,
                          "must be in [0, 1]")


@dataclass(frozen=True)
class AgentReward:
    total: float
    components: dict[str, float]
    penalties: dict[str, float]  # event counts, before weighting
    silenced: tuple[int, ...] = ()  # failed turns scored as given up in one plain answer


def agent_reward(trace: EpisodeTrace, config: AgentRewardConfig | None = None) -> AgentReward:
    """The agent reward of one episode (see the module docstring): its failed turns without
    progress scored as given up, each failed turn with progress as played or as given up,
    whichever scores higher."""
    config = config or AgentRewardConfig()
    attempts = failed_attempts(trace)
    given_up = {turn for turn, progress in attempts.items() if progress == 0}
    honest = sorted(turn for turn, progress in attempts.items() if progress > 0)
    choices = (given_up.union(also) for k in range(len(honest) + 1)
               for also in itertools.combinations(honest, k))
    # max keeps the first of equal totals: the one with the fewest turns given up
    return max((_scored(trace, config, turns) for turns in choices), key=lambda r: r.total)


def _scored(played: EpisodeTrace, config: AgentRewardConfig, given_up: set[int]) -> AgentReward:
    """The formula of the module docstring on `played` with the turns `given_up` silenced."""
    trace = silenced(played, given_up)
    components = {
        "completion": _completion(trace, config.completion_mode),
        "tool_accuracy": tool_f1(trace, config.unexpected_call_accuracy),
        "efficiency": efficiency(trace),
        "timing": timing(trace),
        "format": _format(trace),
    }
    penalties = {
        "wrong_tool": float(_wrong_tools(trace)),
        "redundant_call": float(_redundant_calls(trace)),
        "format_error": float(sum(s.code == StepCode.FORMAT_ERROR for s in trace.steps)),
        "timeout": float(ended_early(trace)),
    }
    total = (config.completion_weight * components["completion"]
             + config.tool_accuracy_weight * components["tool_accuracy"]
             + config.efficiency_weight * components["efficiency"]
             + config.timing_weight * components["timing"]
             + config.format_weight * components["format"]
             - config.wrong_tool_penalty * penalties["wrong_tool"]
             - config.redundant_call_penalty * penalties["redundant_call"]
             - config.format_error_penalty * penalties["format_error"]
             - config.timeout_penalty * penalties["timeout"])
    return AgentReward(max(total, config.min_reward), components, penalties,
                       tuple(sorted(given_up)))


def ended_early(trace: EpisodeTrace) -> bool:
    """Whether the episode was force-terminated by the environment or cut off by the rollout."""
    return trace.truncated or any(s.timeout for s in trace.steps)


def _completion(trace: EpisodeTrace, mode: str) -> float:
    if mode == "turns":
        return progress_reward(trace)
    if not trace.num_turns:
        return 0.0
    return float(first_failure(trace.verdicts, trace.num_turns) is None)


def tool_f1(trace: EpisodeTrace, unexpected_call_accuracy: float = 0.5) -> float:
    """F1 of the calls made against the ground truth's (per turn, pooled), a hit weighted by the
    share of arguments it gets right (`matched_calls`); 1 when neither side calls anything,
    `unexpected_call_accuracy` when only the model does."""
    hits, predicted, target = 0.0, 0, 0
    for calls, expected in zip(trace.calls_per_turn(), trace.ground_truth):
        hits += matched_calls(calls, expected)
        predicted += len(calls)
        target += len(expected)
    if target == 0:
        return 1.0 if predicted == 0 else unexpected_call_accuracy
    if hits == 0:
        return 0.0
    precision, recall = hits / predicted, hits / target
    return 2 * precision * recall / (precision + recall)


def efficiency(trace: EpisodeTrace) -> float:
    """Ground-truth calls / calls made, capped at 1."""
    made = sum(len(calls) for calls in trace.calls_per_turn())
    optimal = sum(len(calls) for calls in trace.ground_truth)
    return 1.0 if made <= optimal else optimal / made


def timing(trace: EpisodeTrace) -> float:
    """Share of the task's turns where the model called tools exactly when the ground truth does;
    a turn never reached counts as mistimed (0 for a task without turns)."""
    reached = {step.turn for step in trace.steps}
    if not trace.num_turns:
        return 0.0
    calls = trace.calls_per_turn()
    return sum(bool(calls[t]) == bool(trace.ground_truth[t]) for t in reached) / trace.num_turns


def _format(trace: EpisodeTrace) -> float:
    if not trace.steps:
        return 0.0
    return sum(s.code != StepCode.FORMAT_ERROR for s in trace.steps) / len(trace.steps)


def _wrong_tools(trace: EpisodeTrace) -> int:
    return sum(call.name not in {c.name for c in expected}
               for calls, expected in zip(trace.calls_per_turn(), trace.ground_truth)
               for call in calls)


def _redundant_calls(trace: EpisodeTrace) -> int:
    redundant = 0
    succeeded: dict[int, Counter] = {}
    for step in trace.steps:
        done = succeeded.setdefault(step.turn, Counter())
        allowed = Counter(trace.ground_truth[step.turn])
        for result in step.results:
            if done[result.call] >= max(allowed[result.call], 1):
                redundant += 1
            elif result.ok:
                done[result.call] += 1
    return redundant
