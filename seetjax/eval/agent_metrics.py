"""Agent metrics of evaluation episodes, beside BFCL's own accuracy.

* tool selection accuracy: F1 of the tools called against the ground truth's, per episode;
* plan success: share of turns with ground-truth calls whose calls match them exactly (FPLD
  finds no divergence), i.e. the right tools with the right arguments in the right order;
* step efficiency: ground-truth calls / calls made, capped at 1;
* timing precision: share of reached turns where the model acted exactly when it should;
* end-to-end success: share of entries that pass BFCL's check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from seetjax.envs.base import EpisodeTrace
from seetjax.envs.bfcl.checker import EntryResult
from seetjax.rewards.agent import efficiency, timing, tool_f1
from seetjax.seet.fpld import first_divergence


@dataclasses.dataclass(frozen=True)
class AgentMetrics:
    tool_selection_accuracy: float
    plan_success: float
    step_efficiency: float
    timing_precision: float
    end_to_end_success: float

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def plan_success(trace: EpisodeTrace) -> tuple[int, int]:
    """(turns whose calls equal the ground truth's, turns with ground-truth calls)."""
    calls = trace.calls_per_turn()
    wanted = [t for t, expected in enumerate(trace.ground_truth) if expected]
    return sum(first_divergence(calls[t], trace.ground_truth[t], match="position") is None
               for t in wanted), len(wanted)


def agent_metrics(traces: Sequence[EpisodeTrace], results: Sequence[EntryResult]) -> AgentMetrics:
    """Means over episodes (plan success pooled over turns)."""
    if not traces:
        raise ValueError("agent_metrics: no episodes")
    plans = [plan_success(t) for t in traces]
    n = len(traces)
    return AgentMetrics(
        tool_selection_accuracy=sum(map(tool_f1, traces)) / n,
        plan_success=sum(p for p, _ in plans) / max(sum(w for _, w in plans), 1),
        step_efficiency=sum(map(efficiency, traces)) / n,
        timing_precision=sum(map(timing, traces)) / n,
        end_to_end_success=sum(r.valid for r in results) / len(results))
