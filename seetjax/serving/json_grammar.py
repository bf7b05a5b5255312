"""JSON Schema as a character automaton: the language of JSON texts a schema accepts, as an NFA
(Thompson's construction, Thompson 1968) that `token_fsm.py` turns into a token-level table.

Covered: `type` (string, integer, number, boolean, null, array, object; a list of types),
`enum`, `const`, `anyOf` / `oneOf`, `items`, `properties` with `required`. An object's keys come
in the schema's order, each optional one may be left out, required ones may not, no others
(`properties: {}` is `{}`); an object without `properties` (or a value without `type`) takes
any JSON value nested at most `ANY_DEPTH` deep. The JSON is written as `json.dumps` writes it:
one optional space after `:` and `,`, none elsewhere (unbounded whitespace would let a model
pad forever). Strings are any
characters but `"`, `\\` and controls, or JSON's escapes. What the schema
does not cover (`pattern`, `minLength`, ...) is not enforced; `$ref` is refused (a ValueError
naming where).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

ANY_DEPTH = 2  # how deep an unconstrained value may nest arrays and objects

Match = Callable[[str], bool]

_DIGIT: Match = str.isdecimal
_ONE_TO_NINE: Match = set("123456789").__contains__
_HEX: Match = set("0123456789abcdefABCDEF").__contains__
_ESCAPED: Match = set('"\\/bfnrt').__contains__


def _string_char(c: str) -> bool:
    return c not in '"\\' and ord(c) >= 0x20


def _is(char: str) -> Match:
    return char.__eq__


class NFA:
    """States 0..n-1 with character edges (a predicate each) and epsilon edges; one start and
    one final state once `build` has run. `marked` states are those of literals written as a
    chat template's own markup (a call's opening and closing): there alone may a template's
    marker tokens be taken (`token_fsm.compile_fsm`)."""

    def __init__(self) -> None:
        self.edges: list[list[tuple[Match, int]]] = []
        self.eps: list[list[int]] = []
        self.marked: set[int] = set()
        self.start = self.state()
        self.final = -1

    def state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def edge(self, a: int, match: Match, b: int | None = None) -> int:
        b = self.state() if b is None else b
        self.edges[a].append((match, b))
        return b

    def link(self, a: int, b: int) -> None:
        self.eps[a].append(b)

    def literal(self, a: int, text: str, marked: bool = False) -> int:
        for char in text:
            a = self.edge(a, _is(char))
            if marked:
                self.marked.add(a)
        return a

    def optional_space(self, a: int) -> int:
        b = self.state()
        self.link(a, b)
        self.edge(a, _is(" "), b)
        return b

    def alternatives(self, a: int, builders: Iterable[Callable[[int], int]]) -> int:
        end = self.state()
        for build in builders:
            self.link(build(a), end)
        return end

    def closure(self, states: Iterable[int]) -> frozenset[int]:
        seen, stack = set(states), list(states)
        while stack:
            for b in self.eps[stack.pop()]:
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
        return frozenset(seen)

    def step(self, states: frozenset[int], char: str, marked: bool = False) -> frozenset[int]:
        """The states after `char` (with `marked`, along edges into marked states alone)."""
        return self.closure({b for a in states for match, b in self.edges[a]
                             if match(char) and (not marked or b in self.marked)})


def schema_nfa(schema: dict[str, Any], prefix: str = "", suffix: str = "",
               where: str = "schema") -> NFA:
    """The NFA of `prefix`, a JSON value valid under `schema`, then `suffix`."""
    nfa = NFA()
    nfa.final = nfa.literal(value(nfa, nfa.literal(nfa.start, prefix), schema, where), suffix)
    return nfa


def value(nfa: NFA, a: int, schema: Any, where: str, depth: int = ANY_DEPTH) -> int:
    """Adds a value valid under `schema` from state `a`; returns its end state."""
    if schema is True or schema == {} or schema is None:
        return _any(nfa, a, depth)
    if not isinstance(schema, dict):
        raise ValueError(f"{where}={schema!r}: a JSON schema must be an object")
    if "$ref" in schema:
        raise ValueError(f"{where}.$ref={schema['$ref']!r}: references are not supported")
    if "const" in schema:
        return nfa.literal(a, _dumps(schema["const"]))
    if "enum" in schema:
        return nfa.alternatives(a, [_literal_of(nfa, v) for v in schema["enum"]])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return nfa.alternatives(a, [_value_of(nfa, s, f"{where}.{key}[{i}]", depth)
                                        for i, s in enumerate(schema[key])])
    kind = schema.get("type")
    if isinstance(kind, list):
        return nfa.alternatives(a, [_value_of(nfa, {**schema, "type": k}, where, depth)
                                    for k in kind])
    if kind is None:
        return _any(nfa, a, depth)
    builders = {"string": _string, "integer": _integer, "number": _number,
                "boolean": lambda n, s: n.alternatives(s, [_literal_of(n, True),
                                                           _literal_of(n, False)]),
                "null": lambda n, s: n.literal(s, "null")}
    if kind in builders:
        return builders[kind](nfa, a)
    if kind == "array":
        return _array(nfa, a, lambda s: value(nfa, s, schema.get("items"), f"{where}.items",
                                              depth))
    if kind == "object":
        if "properties" in schema:
            return _object(nfa, a, schema, where, depth)
        return _any_object(nfa, a, depth)
    raise ValueError(f"{where}.type={kind!r}: not a JSON schema type")


def _dumps(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _literal_of(nfa: NFA, v: Any) -> Callable[[int], int]:
    return lambda a: nfa.literal(a, _dumps(v))


def _value_of(nfa: NFA, schema: Any, where: str, depth: int) -> Callable[[int], int]:
    return lambda a: value(nfa, a, schema, where, depth)


def _string(nfa: NFA, a: int) -> int:
    inside = nfa.edge(a, _is('"'))
    nfa.edge(inside, _string_char, inside)
    escape = nfa.edge(inside, _is("\\"))
    nfa.edge(escape, _ESCAPED, inside)
    hex_digit = nfa.edge(escape, _is("u"))
    for _ in range(3):
        hex_digit = nfa.edge(hex_digit, _HEX)
    nfa.edge(hex_digit, _HEX, inside)
    return nfa.edge(inside, _is('"'))


def _integer(nfa: NFA, a: int) -> int:
    """-?(0|[1-9][0-9]*)"""
    sign = nfa.state()
    nfa.link(a, sign)
    nfa.edge(a, _is("-"), sign)
    end = nfa.edge(sign, _is("0"))
    digits = nfa.edge(sign, _ONE_TO_NINE)
    nfa.edge(digits, _DIGIT, digits)
    nfa.link(digits, end)
    return end


def _number(nfa: NFA, a: int) -> int:
    """integer (\\.[0-9]+)? ([eE][+-]?[0-9]+)?"""
    whole = _integer(nfa, a)
    fraction = nfa.state()
    nfa.link(whole, fraction)
    point = nfa.edge(whole, _is("."))
    decimals = nfa.edge(point, _DIGIT)
    nfa.edge(decimals, _DIGIT, decimals)
    nfa.link(decimals, fraction)
    end = nfa.state()
    nfa.link(fraction, end)
    e = nfa.edge(fraction, set("eE").__contains__)
    signed = nfa.state()
    nfa.link(e, signed)
    nfa.edge(e, set("+-").__contains__, signed)
    exponent = nfa.edge(signed, _DIGIT)
    nfa.edge(exponent, _DIGIT, exponent)
    nfa.link(exponent, end)
    return end


def _array(nfa: NFA, a: int, item: Callable[[int], int]) -> int:
    opened = nfa.edge(a, _is("["))
    end = nfa.edge(opened, _is("]"))
    start = nfa.state()
    nfa.link(opened, start)
    item_end = item(start)
    nfa.edge(item_end, _is("]"), end)
    nfa.link(nfa.optional_space(nfa.edge(item_end, _is(","))), start)
    return end


def _object(nfa: NFA, a: int, schema: dict[str, Any], where: str, depth: int) -> int:
    """The properties in the schema's order. Two lanes: `empty` (no key written yet, so the next
    one has no comma) and `some`; a property may be skipped unless required."""
    required = set(schema.get("required") or ())
    empty = nfa.edge(a, _is("{"))
    some = nfa.state()
    for key, sub in schema["properties"].items():
        pair = nfa.state()
        nfa.link(empty, pair)
        nfa.link(nfa.optional_space(nfa.edge(some, _is(","))), pair)
        colon = nfa.edge(nfa.literal(pair, _dumps(key)), _is(":"))
        done = value(nfa, nfa.optional_space(colon), sub, f"{where}.properties.{key}", depth)
        next_empty, next_some = nfa.state(), nfa.state()
        nfa.link(done, next_some)
        if key not in required:
            nfa.link(empty, next_empty)
            nfa.link(some, next_some)
        empty, some = next_empty, next_some
    end = nfa.edge(some, _is("}"))
    nfa.edge(empty, _is("}"), end)
    return end


def _any_object(nfa: NFA, a: int, depth: int) -> int:
    """{} or {"key": any, ...} (values one level less deep; at depth 0 only {})."""
    opened = nfa.edge(a, _is("{"))
    end = nfa.edge(opened, _is("}"))
    if depth <= 0:
        return end
    pair = nfa.state()
    nfa.link(opened, pair)
    colon = nfa.edge(_string(nfa, pair), _is(":"))
    done = _any(nfa, nfa.optional_space(colon), depth - 1)
    nfa.edge(done, _is("}"), end)
    nfa.link(nfa.optional_space(nfa.edge(done, _is(","))), pair)
    return end


def _any(nfa: NFA, a: int, depth: int) -> int:
    """Any JSON value, arrays and objects nested at most `depth` deep."""
    builders: list[Callable[[int], int]] = [
        lambda s: _string(nfa, s), lambda s: _number(nfa, s), _literal_of(nfa, True),
        _literal_of(nfa, False), _literal_of(nfa, None)]
    builders.append(lambda s: _any_object(nfa, s, depth))
    if depth > 0:
        builders.append(lambda s: _array(nfa, s, lambda t: _any(nfa, t, depth - 1)))
    return nfa.alternatives(a, builders)
