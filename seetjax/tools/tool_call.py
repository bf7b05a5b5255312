"""`ToolCall`, the one canonical form of a tool call, and the bounds every argument value keeps.

Equality and hashing use a canonical JSON key (1 and 1.0 are one value, tuples are lists); every
method is total for any values a caller may build, including integers past the parsers' bounds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Bounds on argument values. No legitimate tool argument comes near them, and past them ordinary
# operations on a value fail or take unbounded time: an integer of over 4,300 digits cannot be
# printed (Python's int-to-str limit), so its call could not be keyed, compared or shown. Depth
# also keeps every walk over values far from Python's recursion limit.
MAX_VALUE_DEPTH = 16
MAX_INT_DIGITS = 64
MAX_STRING_CHARS = 16_384
MAX_CONTAINER_ITEMS = 1_024
INT_BOUND = 10 ** MAX_INT_DIGITS


@dataclass(frozen=True, eq=False)
class ToolCall:
    """One call: a tool name and keyword arguments (JSON-like literal values).

    `positional` holds positional arguments the parser could not map to names (unknown tool, too
    many, or a clash with a keyword); validation reports them. Equality and hashing use the
    canonical form, where 1 and 1.0 are the same value and tuples are lists.
    """

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    positional: tuple[Any, ...] = ()

    def key(self) -> str:
        """The canonical form: compact JSON of name, sorted arguments and unmapped positionals."""
        return json.dumps([self.name, _jsonable(dict(self.args), True),
                           _jsonable(list(self.positional), True)],
                          sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolCall) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def to_python(self) -> str:
        """BFCL's decoded form, `name(a=1, b='x')`; parses back to an equal call (an integer
        past the parser's bounds is written in hex, which the parser rejects; dict keys are
        written as they are, so a non-string one, which official decoding keeps below the top
        level, reads back only there)."""
        parts = [py_repr(v) for v in self.positional] + [f"{k}={py_repr(v)}"
                                                          for k, v in self.args.items()]
        return f"{self.name}({', '.join(parts)})"

    def to_json(self) -> dict[str, Any]:
        """`{"name": ..., "arguments": {...}}`, the chat template's `tool_calls` entry: arguments
        as JSON holds them (dict keys as `str` writes them, as the canonical form does; tuples
        as lists; an integer past the bounds as {"int": hex})."""
        return {"name": self.name, "arguments": _jsonable(dict(self.args), False)}

    def to_hermes(self) -> str:
        """A `<tool_call>` block of `to_json()`; reads back to an equal call (values in bounds)."""
        return f"<tool_call>{json.dumps(self.to_json(), ensure_ascii=False)}</tool_call>"

    def __repr__(self) -> str:
        return f"ToolCall({self.to_python()})"


def _jsonable(value: Any, canonical: bool) -> Any:
    """`value` as JSON can hold it: dict keys as `str` writes them (JSON keys are strings; a
    tuple key has no JSON form; `py_repr`'s hex past the bounds), tuples as lists, integers past
    the bounds as {"int": hex}.
    `canonical` also folds integral floats into ints and writes NaN and inf as {"float": ...}."""
    if canonical and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_BOUND < value < INT_BOUND:
        return {"int": hex(value)}  # JSON would print it in decimal, which Python refuses past 4,300 digits
    if canonical and isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}  # only ever built in code: parsers reject them
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, canonical) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else py_repr(k): _jsonable(v, canonical)
                for k, v in value.items()}
    return value


def py_repr(value: Any) -> str:
    """`repr`, except integers past the bounds, written in hex (repr would refuse past 4,300
    digits), recursively."""
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_BOUND < value < INT_BOUND:
        return hex(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_repr(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(py_repr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_repr(k)}: {py_repr(v)}" for k, v in value.items()) + "}"
    return repr(value)
