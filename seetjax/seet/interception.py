"""Stage-2 ground-truth interception.

After each decoded step, the calls the model has made so far in the turn plus the ones it now
proposes are compared with the turn's ground truth, prefix-aware: calls already accepted are never
compared again, so a correct prefix is never blocked. A proposal that departs from the ground
truth is not executed; the model gets a corrective hint naming the divergence and the expected
tool (its arguments only when configured) and tries again. A message without calls while ground
truth calls remain is a premature end of the turn and is intercepted the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from seetjax.seet.fpld import Divergence, first_divergence
from seetjax.tools.calls import ToolCall


@dataclasses.dataclass(frozen=True)
class Interception:
    divergence: Divergence  # index counted from the turn's first call
    hint: str


def intercept(accepted: Sequence[ToolCall], proposed: Sequence[ToolCall],
              ground_truth: Sequence[ToolCall], *, order_free: bool = False,
              reveal_arguments: bool = False) -> Interception | None:
    """None when `proposed` continues the turn's ground truth after the `accepted` calls (or,
    empty, ends a turn whose ground truth is complete); otherwise why it is blocked."""
    if order_free:
        divergence = _order_free_divergence(accepted, proposed, ground_truth)
    else:
        expected = list(ground_truth[len(accepted):])
        if proposed:
            expected = expected[:len(proposed)]
        divergence = first_divergence(proposed, expected)
        if divergence is not None:
            divergence = dataclasses.replace(divergence, index=divergence.index + len(accepted))
    if divergence is None:
        return None
    return Interception(divergence, _hint(divergence, reveal_arguments))


def _order_free_divergence(accepted: Sequence[ToolCall], proposed: Sequence[ToolCall],
                           ground_truth: Sequence[ToolCall]) -> Divergence | None:
    """Each proposed call must match some ground-truth call not yet used (BFCL does not check
    the order of calls within a turn)."""
    remaining = list(ground_truth)
    for call in accepted:
        match = next((i for i, g in enumerate(remaining) if g == call), None)
        if match is not None:
            remaining.pop(match)
    index = len(accepted)
    if not proposed:
        return Divergence(index, "missing_call", None, remaining[0]) if remaining else None
    for call in proposed:
        match = next((i for i, g in enumerate(remaining) if g == call), None)
        if match is not None:
            remaining.pop(match)
            index += 1
            continue
        if not remaining:
            return Divergence(index, "extra_call", call, None)
        same_tool = next((g for g in remaining if g.name == call.name), None)
        if same_tool is None:
            return Divergence(index, "tool_name", call, remaining[0])
        return dataclasses.replace(first_divergence([call], [same_tool]), index=index)
    return None


def _hint(d: Divergence, reveal_arguments: bool) -> str:
    if d.kind == "extra_call":
        return ("This request needs no further calls: the call to "
                f"`{d.failed.name}` was not run. Reply to the user instead.")
    expected = d.anchor.to_python() if reveal_arguments else f"`{d.anchor.name}`"
    if d.kind == "missing_call":
        return f"The request is not finished yet: call {expected} next."
    return f"That step was not run: {d.diagnosis}. The next call should be {expected}."
