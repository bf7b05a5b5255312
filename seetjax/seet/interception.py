"""Stage-2 ground-truth interception.

After each decoded step, the calls the model has made so far in the turn plus the ones it now
proposes are compared with the turn's ground truth, prefix-aware: calls already accepted are never
compared again, so a correct prefix is never blocked. A proposal that departs from the ground
truth is not executed; the model gets a corrective hint naming the divergence and the expected
tool (its arguments only when configured) and tries again. A message without calls while ground
truth calls remain is a premature end of the turn and is intercepted the same way.

Order follows BFCL's checker by default (`order_free=True`): bfcl_eval judges a turn by the end
state of the API instances and by the ground-truth outputs being a multiset subset of the model's
(its call-order check is disabled), so the proposal may take the turn's remaining ground-truth
calls in any order, matched by identity, as long as that order ends the turn in the same state with
the same outputs as the ground truth's order. The episode decides that by running both orders on
copies of its environment (`same_outcome`); without it any order of the right calls passes.
`order_free=False` requires the ground truth's own order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from seetjax.seet.fpld import Divergence, calls_match, first_divergence
from seetjax.tools.calls import ToolCall


@dataclasses.dataclass(frozen=True)
class Interception:
    divergence: Divergence  # index counted from the turn's first call
    hint: str


SameOutcome = Callable[[Sequence[ToolCall], Sequence[ToolCall]], bool]


def intercept(accepted: Sequence[ToolCall], proposed: Sequence[ToolCall],
              ground_truth: Sequence[ToolCall], *, order_free: bool = True,
              reveal_arguments: bool = False,
              same_outcome: SameOutcome | None = None) -> Interception | None:
    """None when `proposed` continues the turn's ground truth after the `accepted` calls (or,
    empty, ends a turn whose ground truth is complete); otherwise why it is blocked.

    `same_outcome(a, b)`, with `order_free`: whether running calls `a` and running calls `b` from
    the current state end in the same state with the same outputs (BFCL's turn check)."""
    if order_free:
        divergence = _order_free_divergence(accepted, proposed, ground_truth, same_outcome)
    else:
        divergence = _in_order_divergence(len(accepted), proposed, ground_truth[len(accepted):])
    if divergence is None:
        return None
    return Interception(divergence, _hint(divergence, reveal_arguments))


def _in_order_divergence(done: int, proposed: Sequence[ToolCall],
                         expected: Sequence[ToolCall]) -> Divergence | None:
    """The proposal against the next expected calls, position by position."""
    expected = list(expected)
    if proposed:
        expected = expected[:len(proposed)]
    divergence = first_divergence(proposed, expected, match="position")
    return None if divergence is None else dataclasses.replace(divergence,
                                                              index=divergence.index + done)


def _order_free_divergence(accepted: Sequence[ToolCall], proposed: Sequence[ToolCall],
                           ground_truth: Sequence[ToolCall],
                           same_outcome: SameOutcome | None) -> Divergence | None:
    """Each proposed call must match (by identity) a ground-truth call not yet used, and the
    proposal's order must not change the turn's outcome."""
    remaining = list(ground_truth)
    for call in accepted:
        match = next((i for i, g in enumerate(remaining) if calls_match(g, call)), None)
        if match is not None:
            remaining.pop(match)
    index = len(accepted)
    if not proposed:
        return Divergence(index, "missing_call", None, remaining[0]) if remaining else None
    rest = list(remaining)
    for call in proposed:
        match = next((i for i, g in enumerate(rest) if calls_match(g, call)), None)
        if match is not None:
            rest.pop(match)
            index += 1
            continue
        if not rest:
            return Divergence(index, "extra_call", call, None)
        same_tool = next((g for g in rest if g.name == call.name), None)
        if same_tool is None:
            return Divergence(index, "tool_name", call, rest[0])
        return dataclasses.replace(first_divergence([call], [same_tool]), index=index)
    in_order = remaining[:len(proposed)]
    if (same_outcome is None or all(calls_match(p, g) for p, g in zip(proposed, in_order))
            or same_outcome(remaining, list(proposed) + rest)):
        return None
    # The right calls, in an order that changes the outcome: blame the first out of order.
    return _in_order_divergence(len(accepted), proposed, remaining)


def _hint(d: Divergence, reveal_arguments: bool) -> str:
    if d.kind == "extra_call":
        return ("This request needs no further calls: the call to "
                f"`{d.failed.name}` was not run. Reply to the user instead.")
    expected = d.anchor.to_python() if reveal_arguments else f"`{d.anchor.name}`"
    if d.kind == "missing_call":
        return f"The request is not finished yet: call {expected} next."
    return f"That step was not run: {d.diagnosis}. The next call should be {expected}."
