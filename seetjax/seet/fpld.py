"""FPLD: the first point of logical divergence between two tool-call sequences.

Given the calls a failed trajectory made and the calls of a correct (anchor) trajectory, find the
first point where they differ and say how: a different tool (`tool_name`), the same tool with
different arguments (`argument`, naming missing, extra and changed keys), a call the anchor does
not make (`extra_call`) or one it makes that the failed sequence lacks (`missing_call`). Calls
compare in canonical form: argument order does not matter, 1 == 1.0, tuples are lists, and strings
are normalised as configured.

Calls are matched by identity first (each failed call to the first unmatched equal anchor call:
BFCL does not judge the order of a turn's calls), then by position among the unmatched ones, so
`[B, A']` against `[A, B]` is an argument divergence on A, not a wrong tool at call 0. Indices
count positions in the failed sequence (a missing call sits right after the failed calls matched
to the anchor calls before it). `match="position"` compares strictly position by position.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from seetjax.errors import invalid
from seetjax.tools.calls import ParseError, ToolCall, parse_python_calls
from seetjax.tools.schema import ToolSchema

DivergenceKind = Literal["tool_name", "argument", "extra_call", "missing_call"]
Matching = Literal["identity", "position"]
StringNormalisation = Literal["exact", "strip", "casefold"]
CallLike = ToolCall | str | Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Divergence:
    """Where and how a failed call sequence first departs from its anchor."""

    index: int
    kind: DivergenceKind
    failed: ToolCall | None  # the failed sequence's call at `index` (None: missing_call)
    anchor: ToolCall | None  # the anchor's call at `index` (None: extra_call)
    missing_keys: tuple[str, ...] = ()  # argument names the anchor passes and the failed call not
    extra_keys: tuple[str, ...] = ()  # argument names only the failed call passes
    changed_keys: tuple[str, ...] = ()  # passed by both, with different values
    # Position of `anchor` in the anchor sequence (None: extra_call, or not known). Identity
    # matching pairs calls out of order, so it can differ from `index`.
    anchor_index: int | None = dataclasses.field(default=None, compare=False)

    @property
    def diagnosis(self) -> str:
        """A one-sentence explanation, usable as a hint."""
        where = f"call {self.index + 1}"
        if self.kind == "tool_name":
            return (f"{where} used `{self.failed.name}` where `{self.anchor.name}` was needed")
        if self.kind == "extra_call":
            return f"{where} (`{self.failed.name}`) is not needed: the request was already done"
        if self.kind == "missing_call":
            return f"{where} is missing: `{self.anchor.name}` still has to be called"
        parts = []
        if self.missing_keys:
            parts.append("missing " + ", ".join(f"`{k}`" for k in self.missing_keys))
        if self.extra_keys:
            parts.append("unexpected " + ", ".join(f"`{k}`" for k in self.extra_keys))
        if self.changed_keys:
            parts.append("wrong value for " + ", ".join(f"`{k}`" for k in self.changed_keys))
        return f"{where} to `{self.anchor.name}` has the right tool but {'; '.join(parts)}"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind,
                "failed": None if self.failed is None else self.failed.to_json(),
                "anchor": None if self.anchor is None else self.anchor.to_json(),
                "anchor_index": self.anchor_index,
                "missing_keys": list(self.missing_keys), "extra_keys": list(self.extra_keys),
                "changed_keys": list(self.changed_keys), "diagnosis": self.diagnosis}


def as_call(call: CallLike, schemas: Mapping[str, ToolSchema] | None = None) -> ToolCall:
    """A ToolCall from a ToolCall, a python-format string `f(a=1)` (positional arguments named
    through `schemas`) or a dict `{"name": ..., "arguments": {...}}`."""
    if isinstance(call, ToolCall):
        if call.positional and schemas and call.name in schemas:
            return as_call(call.to_python(), schemas)
        return call
    if isinstance(call, str):
        parsed = parse_python_calls(call, schemas)
        if isinstance(parsed, ParseError) or len(parsed) != 1:
            raise ValueError(f"not one call: {call!r} ({parsed})")
        return parsed[0]
    if isinstance(call, Mapping):
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        return ToolCall(str(function["name"]), dict(arguments))
    raise TypeError(f"cannot read a tool call from {type(call).__name__}")


def first_divergence(failed_calls: Sequence[CallLike], anchor_calls: Sequence[CallLike],
                     schema: Mapping[str, ToolSchema] | None = None,
                     strings: StringNormalisation = "exact",
                     match: Matching = "identity") -> Divergence | None:
    """The first divergence between the canonical calls; None when the sequences agree (as
    multisets with `match="identity"`, position by position with `match="position"`).

    `schema` (tool name -> ToolSchema) names positional arguments; `strings` normalises string
    values before comparing ("strip": surrounding whitespace; "casefold": that and case).
    """
    failed = [as_call(c, schema) for c in failed_calls]
    anchor = [as_call(c, schema) for c in anchor_calls]
    keys_f = [_call_key(c, strings) for c in failed]
    keys_a = [_call_key(c, strings) for c in anchor]
    if match not in ("identity", "position"):
        raise invalid("first_divergence", "match", match, "one of 'identity', 'position'")
    # anchor index -> failed index matched by identity
    partner = _identity_partners(keys_f, keys_a) if match == "identity" else {}
    free_f = [i for i in range(len(failed)) if i not in partner.values()]
    free_a = [j for j in range(len(anchor)) if j not in partner]
    found: list[tuple[int, int, Divergence]] = []  # (index, tie-break, divergence)
    for i, j in zip(free_f, free_a):
        partner[j] = i
        if keys_f[i] != keys_a[j]:
            found.append((i, 0, dataclasses.replace(
                _pair_divergence(i, failed[i], anchor[j], strings), anchor_index=j)))
    found += [(i, 0, Divergence(i, "extra_call", failed[i], None))
              for i in free_f[len(free_a):]]
    for j in free_a[len(free_f):]:
        index = max((partner[k] + 1 for k in range(j) if k in partner), default=0)
        found.append((index, 1, Divergence(index, "missing_call", None, anchor[j],
                                           anchor_index=j)))
    return min(found, key=lambda x: x[:2])[2] if found else None


def made_anchor_calls(calls: Sequence[CallLike], anchor_calls: Sequence[CallLike],
                      schema: Mapping[str, ToolSchema] | None = None,
                      strings: StringNormalisation = "exact") -> set[int]:
    """Positions of the anchor calls that `calls` already made, matched as `first_divergence`
    matches by identity (each call takes the first unmatched equal anchor call)."""
    keys_f = [_call_key(as_call(c, schema), strings) for c in calls]
    keys_a = [_call_key(as_call(c, schema), strings) for c in anchor_calls]
    return set(_identity_partners(keys_f, keys_a))


def _identity_partners(keys_f: Sequence[Any], keys_a: Sequence[Any]) -> dict[int, int]:
    """Anchor index -> failed index: each failed call, in order, to the first unmatched anchor
    call with an equal key."""
    partner: dict[int, int] = {}
    for i, key in enumerate(keys_f):
        j = next((j for j, k in enumerate(keys_a) if k == key and j not in partner), None)
        if j is not None:
            partner[j] = i
    return partner


def _pair_divergence(index: int, f: ToolCall, a: ToolCall,
                     strings: StringNormalisation) -> Divergence:
    if f.name != a.name:
        return Divergence(index, "tool_name", f, a)
    fa, aa = _keyed(f.args, strings), _keyed(a.args, strings)
    return Divergence(
        index, "argument", f, a, missing_keys=tuple(sorted(set(aa) - set(fa))),
        extra_keys=tuple(sorted(set(fa) - set(aa))),
        changed_keys=tuple(sorted(k for k in set(fa) & set(aa) if fa[k] != aa[k])))


def _call_key(call: ToolCall, strings: StringNormalisation) -> tuple[str, dict, dict]:
    return (call.name, _keyed(call.args, strings), _keyed(list(call.positional), strings))


def calls_match(a: CallLike, b: CallLike, schema: Mapping[str, ToolSchema] | None = None,
                strings: StringNormalisation = "exact") -> bool:
    return first_divergence([a], [b], schema, strings) is None


def _keyed(values: Mapping[str, Any] | list[Any], strings: StringNormalisation) -> dict[Any, str]:
    """Each argument (by name, or by position) as canonical JSON text: equal text, equal value.
    Comparing text keeps True apart from 1, which Python's == would not."""
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    return {k: json.dumps(_normalised(v, strings), sort_keys=True, ensure_ascii=False)
            for k, v in items}


def _normalised(value: Any, strings: StringNormalisation) -> Any:
    """Canonical JSON-like value: integral floats as ints (1.0 == 1), tuples as lists, strings
    normalised."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        if strings == "strip":
            return value.strip()
        if strings == "casefold":
            return value.strip().casefold()
        return value
    if isinstance(value, Mapping):
        return {str(k): _normalised(v, strings) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalised(v, strings) for v in value]
    return value
