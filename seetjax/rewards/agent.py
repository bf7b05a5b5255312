"""The five-component agent reward with penalties.

    reward = w_c * completion + w_t * tool_accuracy + w_e * efficiency + w_m * timing + w_f * format
             - p_wrong * #wrong_tool - p_redundant * #redundant - p_format * #format_errors
             - p_timeout * [force-terminated]                       clipped below at `min_reward`

Every component is in [0, 1]:

* completion: passed turns / judged turns (`completion_mode="turns"`, EnvTuning's progress), or
  1 when the whole entry passes BFCL's check (`"entry"`);
* tool_accuracy: F1 of the tool names called against the ground truth's, as multisets per turn,
  pooled over turns (1 when neither side calls anything);
* efficiency: ground-truth calls / calls made, capped at 1 (too few calls are the business of
  completion and tool accuracy, not of efficiency);
* timing: share of the turns reached where the model called tools exactly when the ground truth
  does (acting on a request; making no call when a tool or a value is missing);
* format: share of messages that parsed.

Penalties count events: a call to a tool that is not among its turn's targets, an exact repeat of
a call that already succeeded in the same turn (beyond the repeats the ground truth makes), an
unparsable message, and a force-terminated episode (once). Weights need not sum to 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from seetjax.envs.base import EpisodeTrace, StepCode
from seetjax.eval.bfcl_checker import first_failure


@dataclass(frozen=True)
class AgentRewardConfig:
    completion_weight: float = 0.4
    tool_accuracy_weight: float = 0.2
    efficiency_weight: float = 0.1
    timing_weight: float = 0.2
    format_weight: float = 0.1
    completion_mode: str = "turns"  # "turns" or "entry"
    wrong_tool_penalty: float = 0.05
    redundant_call_penalty: float = 0.05
    format_error_penalty: float = 0.1
    timeout_penalty: float = 0.5
    min_reward: float = -1.0

    def __post_init__(self):
        if self.completion_mode not in ("turns", "entry"):
            raise ValueError(f"completion_mode must be 'turns' or 'entry', not {self.completion_mode!r}")


@dataclass(frozen=True)
class AgentReward:
    total: float
    components: dict[str, float]
    penalties: dict[str, float]  # event counts, before weighting


def agent_reward(trace: EpisodeTrace, config: AgentRewardConfig | None = None) -> AgentReward:
    """The agent reward of one episode (see the module docstring)."""
    config = config or AgentRewardConfig()
    components = {
        "completion": _completion(trace, config.completion_mode),
        "tool_accuracy": _tool_f1(trace),
        "efficiency": _efficiency(trace),
        "timing": _timing(trace),
        "format": _format(trace),
    }
    penalties = {
        "wrong_tool": float(_wrong_tools(trace)),
        "redundant_call": float(_redundant_calls(trace)),
        "format_error": float(sum(s.code == StepCode.FORMAT_ERROR for s in trace.steps)),
        "timeout": float(any(s.timeout for s in trace.steps)),
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
    return AgentReward(max(total, config.min_reward), components, penalties)


def _completion(trace: EpisodeTrace, mode: str) -> float:
    verdicts = trace.verdicts
    if not verdicts:
        return 0.0
    if mode == "turns":
        return sum(v.passed for v in verdicts) / len(verdicts)
    return float(first_failure(verdicts, trace.num_turns) is None)


def _tool_f1(trace: EpisodeTrace) -> float:
    hits = predicted = target = 0
    for calls, expected in zip(trace.calls_per_turn(), trace.ground_truth):
        made, wanted = Counter(c.name for c in calls), Counter(c.name for c in expected)
        hits += sum((made & wanted).values())
        predicted += sum(made.values())
        target += sum(wanted.values())
    if predicted == target == 0:
        return 1.0
    if hits == 0:
        return 0.0
    precision, recall = hits / predicted, hits / target
    return 2 * precision * recall / (precision + recall)


def _efficiency(trace: EpisodeTrace) -> float:
    made = sum(len(calls) for calls in trace.calls_per_turn())
    optimal = sum(len(calls) for calls in trace.ground_truth)
    return 1.0 if made <= optimal else optimal / made


def _timing(trace: EpisodeTrace) -> float:
    reached = sorted({step.turn for step in trace.steps})
    if not reached:
        return 0.0
    calls = trace.calls_per_turn()
    return sum(bool(calls[t]) == bool(trace.ground_truth[t]) for t in reached) / len(reached)


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
