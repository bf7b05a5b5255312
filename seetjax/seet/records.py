"""SEET's slow loop: counterfactual records from failed turns and their anchors.

For a failed turn with an anchor, FPLD finds the first call where the failure departs from the
anchor; the reply that made (or, for a missing call, failed to make) that call is the failed step.
Both lines are the calls that actually executed, in order: a retried attempt's calls that ran
(training_context "mask" or "keep") are part of the turn's state, so they are part of its line;
intercepted calls and the calls of an attempt whose effects were undone ("drop") are not. The
record pairs the failed step with the reply the policy should have produced instead, both after the
same shared prefix (the failed episode's training sequence up to the failed step). That target is
aligned by call, not by reply: the anchor's calls not yet made, through the anchor step that holds
the corrected call, so it contains the corrected call however either side grouped its calls.
Where a branching rollout resampled the failed step from the same state and the checker passed
that branch's turn (`seetjax.rollout.branching.verified_replies`), the slow loop replaces the
target with the branch's reply as sampled, on-policy, and marks the record's `anchor_source`
"branch". Failed attempts that were retried or intercepted are negatives too: each whose
proposed calls depart from the anchor becomes a record against it. Records feed the counterfactual loss and
`counterfactual_records.jsonl`; they never change a reward.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from seetjax.seet.anchors import Anchor
from seetjax.seet.fpld import Divergence, first_divergence, made_anchor_calls
from seetjax.tools.calls import ToolCall


@dataclasses.dataclass(frozen=True)
class StepView:
    """One reply of a failed turn, as the slow loop needs it."""

    segment: int  # index of the reply's segment in the episode's conversation
    ids: tuple[int, ...]  # the reply as generated
    calls: tuple[ToolCall, ...]  # the calls it made (none: it ended the turn or did not parse)
    attempt: bool = False  # a failed attempt that was retried or intercepted
    well_formed: bool = True  # it ended with its stop token and parsed (as calls or as prose)
    # The calls of this reply that executed and stayed executed, in order (rejected, intercepted
    # and undone calls are not). None: all of `calls` for a reply of the line, none for an attempt.
    executed: tuple[ToolCall, ...] | None = None

    @property
    def ran(self) -> tuple[ToolCall, ...]:
        if self.executed is not None:
            return self.executed
        return () if self.attempt else self.calls


@dataclasses.dataclass(frozen=True)
class CounterfactualRecord:
    task_id: str
    turn: int
    sample: int
    stage: int
    prefix_ids: tuple[int, ...]
    failed_ids: tuple[int, ...]
    anchor_ids: tuple[int, ...]
    divergence: Divergence
    anchor_source: str

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "turn": self.turn, "sample": self.sample,
                "stage": self.stage, "anchor_source": self.anchor_source,
                "divergence": self.divergence.to_json(), "prefix_ids": list(self.prefix_ids),
                "failed_ids": list(self.failed_ids), "anchor_ids": list(self.anchor_ids)}


def anchor_target_ids(anchor: Anchor, done: Collection[int], due: int | None, render,
                      stop_id: int) -> tuple[int, ...]:
    """The reply the policy should produce in place of a failed one, aligned by call, not by
    reply: the anchor's calls that the turn has not made yet (`done`: positions of anchor calls
    already executed before the failed reply), in the anchor's order, through the end of the
    anchor step that holds call `due` (the corrected call; None: the first call not made yet).
    So the target always contains the corrected call, however the anchor grouped its calls into
    replies. The anchor's own reply when the target is exactly one of its steps; otherwise the
    calls rendered by `render` (calls -> ids, without the stop token) plus `stop_id`; the
    anchor's turn-ending reply when no call is left."""
    left = [j for j in range(len(anchor.calls)) if j not in done]
    if due is None and not left:
        return anchor.steps[-1].tokens
    due = left[0] if due is None else due
    start = 0
    for step in anchor.steps:
        end = start + len(step.calls)
        if due < end:
            break
        start = end
    chosen = [j for j in left if j < end]
    if chosen == list(range(start, end)):
        return step.tokens
    calls = anchor.calls
    return tuple(render([calls[j] for j in chosen])) + (stop_id,)


def records_for_turn(task_id: str, turn: int, sample: int, stage: int, steps: Sequence[StepView],
                     anchor: Anchor, prefix_of, render, stop_id: int
                     ) -> list[CounterfactualRecord]:
    """Records of one failed turn: the first divergence of the calls the turn executed, at the
    reply responsible for it, and every failed attempt whose proposed calls depart from the
    anchor. `prefix_of(segment)` gives the training-sequence ids before a segment."""
    starts, flat = _line(steps)
    records = []
    line = None
    found = divergent_step(steps, anchor.calls)
    if found is not None:
        k, divergence = found
        line = steps[k].segment
        done = made_anchor_calls(flat[:starts[k]], anchor.calls)
        made = made_anchor_calls(flat[:divergence.index], anchor.calls) - done
        target = anchor_target_ids(anchor, done, _due(divergence, made), render, stop_id)
        records.append(_record(task_id, turn, sample, stage, prefix_of(line), steps[k],
                               anchor, divergence, target))
    for attempt, before in zip(steps, starts):
        if not attempt.attempt or attempt.segment == line:
            continue
        done = made_anchor_calls(flat[:before], anchor.calls)
        left = [j for j in range(len(anchor.calls)) if j not in done]
        expected = left[:max(len(attempt.calls), 1)]
        expected_calls = [anchor.calls[j] for j in expected]
        d = first_divergence(attempt.calls, expected_calls)
        if d is not None:
            made = made_anchor_calls(attempt.calls[:d.index], expected_calls)
            due = _due(d, {expected[j] for j in made})
            if d.anchor_index is not None:
                d = dataclasses.replace(d, anchor_index=due)
            d = dataclasses.replace(d, index=d.index + before)
            target = anchor_target_ids(anchor, done, due, render, stop_id)
            records.append(_record(task_id, turn, sample, stage, prefix_of(attempt.segment),
                                   attempt, anchor, d, target))
    return records


def _line(steps: Sequence[StepView]) -> tuple[list[int], list[ToolCall]]:
    """The calls a turn executed, in order, and where each reply's executed calls start."""
    starts, flat = [], []
    for s in steps:
        starts.append(len(flat))
        flat += s.ran
    return starts, flat


def divergent_step(steps: Sequence[StepView], calls: Sequence[ToolCall]
                   ) -> tuple[int, Divergence] | None:
    """The first point of logical divergence of a failed turn: the index in `steps` of the reply
    responsible for the first divergence (`first_divergence`) of the calls the turn executed from
    `calls` (an anchor's, or the turn's ground truth), with that divergence; None when they agree
    or only a retried attempt could have made a missing call."""
    starts, flat = _line(steps)
    divergence = first_divergence(flat, calls)
    if divergence is None or not steps:
        return None
    k = _responsible(steps, starts, divergence)
    return None if k is None else (k, divergence)


def _due(divergence: Divergence, made: set[int]) -> int | None:
    """The anchor call the target must reach: the corrected one; for an extra call, the last
    anchor call the failed reply made before it (so the target stops where the anchor did)."""
    if divergence.anchor_index is not None:
        return divergence.anchor_index
    return max(made, default=None)


def _responsible(steps: Sequence[StepView], starts: Sequence[int],
                 divergence: Divergence) -> int | None:
    """The reply to blame for a divergence of the executed line: the one that executed the
    failed call. For a missing call (due before executed call k), the first reply of the turn's
    line (not a retried attempt, which has its own record) that could have made it: the one that
    executed call k-1 if it went on to call k or proposed calls that did not run, else any later
    one. None when only attempts could have."""
    k = divergence.index
    if divergence.failed is not None:
        return next((i for i, s in enumerate(steps) if starts[i] <= k < starts[i] + len(s.ran)),
                    len(steps) - 1)
    holder = next((i for i, s in enumerate(steps) if starts[i] < k <= starts[i] + len(s.ran)),
                  -1)
    for i in range(max(holder, 0), len(steps)):
        s = steps[i]
        could = i > holder or starts[i] + len(s.ran) > k or len(s.calls) > len(s.ran)
        if could and not s.attempt:
            return i
    return None


def _record(task_id, turn, sample, stage, prefix, failed: StepView, anchor: Anchor,
            divergence: Divergence, target: tuple[int, ...]) -> CounterfactualRecord:
    return CounterfactualRecord(
        task_id=task_id, turn=turn, sample=sample, stage=stage, prefix_ids=tuple(prefix),
        failed_ids=failed.ids, anchor_ids=target, divergence=divergence,
        anchor_source=anchor.source)


def write_jsonl(records: Iterable[CounterfactualRecord], path: str | os.PathLike) -> int:
    """Appends records to a JSONL file; returns how many."""
    n = 0
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r.to_json()) + "\n")
            n += 1
    return n
