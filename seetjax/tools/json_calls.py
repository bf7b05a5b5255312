"""The JSON parsers: Hermes/Qwen `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks
(any number per message, text around them allowed) and a bare JSON object or list of them.

Numbers are checked as the JSON is read and the decoded value against the bounds of
seetjax.tools.tool_call; a bad message is a `ParseError`, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from seetjax.tools.parsing import (
    ParamNames,
    ParseError,
    Reject,
    error_at,
    message_body,
    scalar_problem,
    short_error,
)
from seetjax.tools.tool_call import MAX_CONTAINER_ITEMS, MAX_INT_DIGITS, MAX_VALUE_DEPTH, ToolCall

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OPEN_TAG, _CLOSE_TAG = "<tool_call>", "</tool_call>"


def parse_hermes_calls(text: str, schemas: Mapping[str, ParamNames] | None = None
                       ) -> list[ToolCall] | ParseError:
    """Hermes/Qwen `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks. (JSON
    arguments are always named: `schemas` is accepted for a signature shared by all parsers.)"""
    calls, end = [], 0
    # One left-to-right scan with str.find (a lazy regex rescans the tail from every unclosed
    # tag: quadratic in the message length).
    while (opened := text.find(_OPEN_TAG, end)) >= 0:
        stray = _stray_tag(text, end, opened)
        if stray is not None:
            return stray
        body = opened + len(_OPEN_TAG)
        closed = text.find(_CLOSE_TAG, body)
        if closed < 0:
            return error_at(text, opened, "hermes", "unclosed <tool_call>")
        stray = _stray_tag(text, body, closed)  # a second <tool_call> before this one closes
        if stray is not None:
            return stray
        try:
            calls.extend(_json_calls(text[body:closed], body, single=True))
        except Reject as e:
            return error_at(text, e.offset, "hermes", e.message)
        end = closed + len(_CLOSE_TAG)
    return _stray_tag(text, end, len(text)) or calls


def parse_json_calls(text: str, schemas: Mapping[str, ParamNames] | None = None
                     ) -> list[ToolCall] | ParseError:
    """A JSON object `{"name": ..., "arguments": {...}}` or a list of them (`function` and
    `parameters`, BFCL's JSON output keys, are read too; `schemas` as for hermes)."""
    body, start = message_body(text)
    if not body.startswith(("{", "[")):
        return []
    try:
        return _json_calls(body, start, single=False)
    except Reject as e:
        return error_at(text, e.offset, "json", e.message)


def _json_calls(body: str, start: int, single: bool) -> list[ToolCall]:
    stripped = body.strip()
    inner = start + (len(body) - len(body.lstrip()))
    try:
        value = _json_loads(stripped)
    except json.JSONDecodeError as e:
        raise Reject(f"invalid JSON: {e.msg}", inner + e.pos) from None
    except Reject as e:
        raise Reject(e.message, inner) from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise Reject(f"cannot read the JSON: {short_error(e)}", inner) from None
    _check_value(value, inner)
    if single and not isinstance(value, dict):
        raise Reject("a <tool_call> block must hold one JSON object", inner)
    items = value if isinstance(value, list) else [value]
    return [_json_call(item, inner) for item in items]


def _json_call(item: Any, offset: int) -> ToolCall:
    if not isinstance(item, dict):
        raise Reject(f"each call must be a JSON object, found {type(item).__name__}", offset)
    unknown = set(item) - {"name", "arguments", "function", "parameters"}
    if unknown:
        raise Reject(f"unexpected key(s) {sorted(unknown)} in a call; use name and arguments", offset)
    name = item.get("name", item.get("function"))
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise Reject(f"the tool name must be an identifier string, found {name!r}"[:200], offset)
    args = item.get("arguments", item.get("parameters", {}))
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = _json_loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError, ValueError, Reject):
            raise Reject(f"the arguments of {name} are a string that is not a JSON object",
                          offset) from None
        _check_value(args, offset)
    if not isinstance(args, dict):
        raise Reject(f"the arguments of {name} must be a JSON object", offset)
    return ToolCall(name, args)


def _json_loads(text: str) -> Any:
    """json.loads with numbers checked as they are read: no NaN/Infinity, no float that
    overflows to inf (`1e400`), no integer past the digit bound (checked before conversion)."""
    return json.loads(text, parse_constant=_reject_json_constant, parse_float=_json_float,
                      parse_int=_json_int)


def _reject_json_constant(name: str) -> Any:
    raise Reject(f"{name} is not allowed; numbers must be finite")


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Reject(f"{text[:40]} is not a finite number")
    return value


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise Reject(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


def _check_value(value: Any, offset: int) -> None:
    """A decoded JSON value within the bounds (depth, container items, string length)."""
    stack = [(value, 0)]
    while stack:  # iterative: the value may be as deep as the JSON decoder allowed
        item, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH + 1:
            raise Reject(f"value nested deeper than {MAX_VALUE_DEPTH} levels", offset)
        if isinstance(item, (dict, list)) and len(item) > MAX_CONTAINER_ITEMS:
            raise Reject(f"a value with {len(item)} items (limit {MAX_CONTAINER_ITEMS})", offset)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif (problem := scalar_problem(item)) is not None:
            raise Reject(problem, offset)


def _stray_tag(text: str, begin: int, end: int) -> ParseError | None:
    for tag in ("<tool_call>", "</tool_call>"):
        position = text.find(tag, begin, end)
        if position >= 0:
            problem = "unclosed <tool_call>" if tag == "<tool_call>" else "</tool_call> without <tool_call>"
            return error_at(text, position, "hermes", problem)
    return None
