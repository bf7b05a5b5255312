"""The parsers that turn model text into `ToolCall`s (seetjax.tools.tool_call).

Formats: ``python``, BFCL's prompting format ``[f(a=1), g(b='x')]`` (a single ``f(a=1)`` too);
``hermes``, Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, any
number per message, text around them allowed; ``json``, an object ``{"name": ..., "arguments":
{...}}`` or a list of them. Values are literals only: Python text is read with `ast.parse` and
every node is checked to be a literal (string, number, bool, None, list, tuple, dict; a tuple
stays a tuple); nothing is evaluated. Positional arguments get their parameter names from the
tool's schema (BFCL's own decoder drops them; `seetjax.tools.official` decodes as BFCL does).
A dotted tool name (`math.factorial(n=5)`, as BFCL's single-turn tools are named) is read only
where `schemas` documents it; any other attribute access is refused.

Parsers never raise on bad model text: they return a `ParseError` that says what is wrong and where.
A message that does not attempt a call at all (plain prose) parses to an empty list: the turn ends.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from seetjax.tools.tool_call import (
    INT_BOUND,
    MAX_CONTAINER_ITEMS,
    MAX_INT_DIGITS,
    MAX_STRING_CHARS,
    MAX_VALUE_DEPTH,
    ToolCall,
    py_repr,
)

CallFormat = Literal["python", "hermes", "json", "auto"]

MAX_MESSAGE_CHARS = 65_536
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A message attempts python-format calls when it starts like one, `[name(` or `name(` (no space
# before the parenthesis, so prose such as "Sorry (I cannot)..." stays prose).
_PY_CALL_START = re.compile(r"\[?\s*[A-Za-z_][\w.]*\(")
_PY_CALL_ANYWHERE = re.compile(r"\[\s*[A-Za-z_][\w.]*\(")
_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)
_OPEN_TAG, _CLOSE_TAG = "<tool_call>", "</tool_call>"


class ParamNames(Protocol):
    """Anything that knows a tool's parameter names in positional order (a `ToolSchema`)."""
    @property
    def param_names(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class ParseError:
    """Why a message could not be read as tool calls, and where (1-based line and column)."""

    message: str
    fmt: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line}, column {self.column})" if self.line is not None else ""
        return f"could not parse {self.fmt} tool calls{where}: {self.message}"


class _Reject(Exception):
    """A value or call that is not allowed, with the character offset of the culprit."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.message, self.offset = message, offset


def parse_tool_calls(text: str, fmt: CallFormat = "auto",
                     schemas: Mapping[str, ParamNames] | None = None,
                     max_chars: int = MAX_MESSAGE_CHARS) -> list[ToolCall] | ParseError:
    """Reads the tool calls of one assistant message; `[]` when it makes none (plain text).

    `fmt="auto"` picks hermes when a `<tool_call>` tag is present, json when the message is a JSON
    object or list, python otherwise. `schemas` (name -> schema) maps positional arguments to names.
    """
    if not isinstance(text, str):
        return ParseError(f"expected a string message, got {type(text).__name__}", str(fmt))
    if len(text) > max_chars:
        return ParseError(f"message too long ({len(text)} characters; limit {max_chars})", str(fmt))
    if fmt == "auto":
        stripped = _message_body(text)[0]
        if "<tool_call>" in text or "</tool_call>" in text:
            fmt = "hermes"
        elif stripped.startswith("{") or re.match(r"\[\s*\{", stripped):
            fmt = "json"
        else:
            fmt = "python"
    parser = {"python": parse_python_calls, "hermes": parse_hermes_calls,
              "json": parse_json_calls}.get(fmt)
    if parser is None:
        return ParseError(f"unknown call format {fmt!r}; one of python, hermes, json, auto", str(fmt))
    return parser(text, schemas)


def parse_python_calls(text: str, schemas: Mapping[str, ParamNames] | None = None
                       ) -> list[ToolCall] | ParseError:
    """BFCL's python-list format, `[f(a=1), g(b='x')]`; literal arguments only."""
    body, start = _message_body(text)
    if body in ("", "[]"):
        return []
    # A bracketed message is a call list, however garbled; otherwise it must start like a call.
    if not _PY_CALL_START.match(body) and not (body.startswith("[") and body.endswith("]")):
        found = _PY_CALL_ANYWHERE.search(body)
        if found is None:
            return []  # prose: no call attempted
        return _error(text, start + found.start(), "python",
                      "text before the call list; the message must be only the list of calls")
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError as e:
        offset = _offset_of(body, e.lineno, e.offset - 1 if e.offset else 0, utf8=False)
        return _error(text, start + offset, "python", f"invalid syntax: {e.msg}")
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return ParseError(f"cannot read the message as Python literals: {_short(e)}", "python")
    node = tree.body
    elements = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls = []
    try:
        for element in elements:
            calls.append(_python_call(element, body, schemas))
    except _Reject as e:
        return _error(text, None if e.offset is None else start + e.offset, "python", e.message)
    return calls


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
            return _error(text, opened, "hermes", "unclosed <tool_call>")
        stray = _stray_tag(text, body, closed)  # a second <tool_call> before this one closes
        if stray is not None:
            return stray
        try:
            calls.extend(_json_calls(text[body:closed], body, single=True))
        except _Reject as e:
            return _error(text, e.offset, "hermes", e.message)
        end = closed + len(_CLOSE_TAG)
    return _stray_tag(text, end, len(text)) or calls


def parse_json_calls(text: str, schemas: Mapping[str, ParamNames] | None = None
                     ) -> list[ToolCall] | ParseError:
    """A JSON object `{"name": ..., "arguments": {...}}` or a list of them (`function` and
    `parameters`, BFCL's JSON output keys, are read too; `schemas` as for hermes)."""
    body, start = _message_body(text)
    if not body.startswith(("{", "[")):
        return []
    try:
        return _json_calls(body, start, single=False)
    except _Reject as e:
        return _error(text, e.offset, "json", e.message)


# ----------------------------------------------------------------------------------------------
# python format


def _python_call(node: ast.AST, source: str, schemas: Mapping[str, ParamNames] | None) -> ToolCall:
    where = _node_offset(source, node)
    if not isinstance(node, ast.Call):
        raise _Reject(f"expected a function call, found {_describe(node)}", where)
    name = _tool_name(node.func, schemas)
    if name is None:
        raise _Reject(f"the called object must be a plain tool name, found {_describe(node.func)}",
                      _node_offset(source, node.func))
    args: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise _Reject("`**` unpacking is not allowed; pass arguments by name",
                          _node_offset(source, keyword))
        args[keyword.arg] = _literal(keyword.value, source, 0)
    positional = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise _Reject("`*` unpacking is not allowed", _node_offset(source, arg))
        positional.append(_literal(arg, source, 0))
    return _bind(name, args, positional, schemas)


def _tool_name(func: ast.AST, schemas: Mapping[str, ParamNames] | None) -> str | None:
    """A plain name, or a dotted one (`math.factorial`) that `schemas` documents: BFCL's
    single-turn tools are named so. Any other attribute access is refused (`os.system`)."""
    if isinstance(func, ast.Name):
        return func.id
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or not schemas:
        return None
    dotted = ".".join([func.id, *reversed(parts)])
    return dotted if dotted in schemas else None


def _literal(node: ast.AST, source: str, depth: int) -> Any:
    """The value of a literal node; anything else (names, calls, operators) is rejected."""
    if depth > MAX_VALUE_DEPTH:
        raise _Reject(f"value nested deeper than {MAX_VALUE_DEPTH} levels", _node_offset(source, node))
    if isinstance(node, ast.Constant):
        return _constant(node.value, _node_offset(source, node))
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        value = _constant(node.operand.value, _node_offset(source, node))
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple, ast.Dict)):
        items = len(node.keys if isinstance(node, ast.Dict) else node.elts)
        if items > MAX_CONTAINER_ITEMS:
            raise _Reject(f"a value with {items} items (limit {MAX_CONTAINER_ITEMS})",
                          _node_offset(source, node))
    if isinstance(node, (ast.List, ast.Tuple)):
        # A tuple stays a tuple, as bfcl_eval's decoder keeps it: a tool that stores it has a
        # state that differs from one storing the list (its state check compares with `!=`).
        items = [_literal(e, source, depth + 1) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise _Reject("`**` unpacking is not allowed in a dict", _node_offset(source, v))
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                raise _Reject(f"dict keys must be strings, found {_describe(k)}", _node_offset(source, k))
            out[k.value] = _literal(v, source, depth + 1)
        return out
    if isinstance(node, ast.Name):
        hint = {"true": "True", "false": "False", "null": "None"}.get(node.id)
        advice = f"write {hint}" if hint else f"quote strings, e.g. '{node.id}'"
        raise _Reject(f"`{node.id}` is a bare name, not a literal; {advice}", _node_offset(source, node))
    raise _Reject(f"{_describe(node)} is not allowed; arguments must be literals",
                  _node_offset(source, node))


def _constant(value: Any, offset: int | None) -> Any:
    problem = _scalar_problem(value)
    if problem is not None:
        raise _Reject(problem, offset)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise _Reject(f"a {type(value).__name__} constant is not a JSON-like literal", offset)


def _scalar_problem(value: Any) -> str | None:
    """Why a scalar argument value is out of bounds, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "numbers must be finite"
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_BOUND < value < INT_BOUND:
        return f"an integer of more than {MAX_INT_DIGITS} digits"
    if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
        return f"a string of {len(value)} characters (limit {MAX_STRING_CHARS})"
    return None


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"attribute access `.{node.attr}`"
    if isinstance(node, ast.Call):
        return "a call inside the arguments"
    if isinstance(node, ast.Constant):
        return f"the constant {py_repr(node.value)}"[:80]
    return f"an expression of kind {type(node).__name__}"


# ----------------------------------------------------------------------------------------------
# json and hermes formats


def _json_calls(body: str, start: int, single: bool) -> list[ToolCall]:
    stripped = body.strip()
    inner = start + (len(body) - len(body.lstrip()))
    try:
        value = _json_loads(stripped)
    except json.JSONDecodeError as e:
        raise _Reject(f"invalid JSON: {e.msg}", inner + e.pos) from None
    except _Reject as e:
        raise _Reject(e.message, inner) from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise _Reject(f"cannot read the JSON: {_short(e)}", inner) from None
    _check_value(value, inner)
    if single and not isinstance(value, dict):
        raise _Reject("a <tool_call> block must hold one JSON object", inner)
    items = value if isinstance(value, list) else [value]
    return [_json_call(item, inner) for item in items]


def _json_call(item: Any, offset: int) -> ToolCall:
    if not isinstance(item, dict):
        raise _Reject(f"each call must be a JSON object, found {type(item).__name__}", offset)
    unknown = set(item) - {"name", "arguments", "function", "parameters"}
    if unknown:
        raise _Reject(f"unexpected key(s) {sorted(unknown)} in a call; use name and arguments", offset)
    name = item.get("name", item.get("function"))
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise _Reject(f"the tool name must be an identifier string, found {name!r}"[:200], offset)
    args = item.get("arguments", item.get("parameters", {}))
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = _json_loads(args) if args.strip() else {}
        except (json.JSONDecodeError, RecursionError, ValueError, _Reject):
            raise _Reject(f"the arguments of {name} are a string that is not a JSON object",
                          offset) from None
        _check_value(args, offset)
    if not isinstance(args, dict):
        raise _Reject(f"the arguments of {name} must be a JSON object", offset)
    return ToolCall(name, args)


def _json_loads(text: str) -> Any:
    """json.loads with numbers checked as they are read: no NaN/Infinity, no float that
    overflows to inf (`1e400`), no integer past the digit bound (checked before conversion)."""
    return json.loads(text, parse_constant=_reject_json_constant, parse_float=_json_float,
                      parse_int=_json_int)


def _reject_json_constant(name: str) -> Any:
    raise _Reject(f"{name} is not allowed; numbers must be finite")


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject(f"{text[:40]} is not a finite number")
    return value


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Reject(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


def _check_value(value: Any, offset: int) -> None:
    """A decoded JSON value within the bounds (depth, container items, string length)."""
    stack = [(value, 0)]
    while stack:  # iterative: the value may be as deep as the JSON decoder allowed
        item, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH + 1:
            raise _Reject(f"value nested deeper than {MAX_VALUE_DEPTH} levels", offset)
        if isinstance(item, (dict, list)) and len(item) > MAX_CONTAINER_ITEMS:
            raise _Reject(f"a value with {len(item)} items (limit {MAX_CONTAINER_ITEMS})", offset)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif (problem := _scalar_problem(item)) is not None:
            raise _Reject(problem, offset)


def _stray_tag(text: str, begin: int, end: int) -> ParseError | None:
    for tag in ("<tool_call>", "</tool_call>"):
        position = text.find(tag, begin, end)
        if position >= 0:
            problem = "unclosed <tool_call>" if tag == "<tool_call>" else "</tool_call> without <tool_call>"
            return _error(text, position, "hermes", problem)
    return None


# ----------------------------------------------------------------------------------------------
# shared helpers


def _bind(name: str, args: dict[str, Any], positional: list[Any],
          schemas: Mapping[str, ParamNames] | None) -> ToolCall:
    """Maps positional values to parameter names when the schema makes it unambiguous."""
    if positional and schemas is not None and name in schemas:
        names = schemas[name].param_names[:len(positional)]
        if len(names) == len(positional) and not set(names) & set(args):
            return ToolCall(name, {**dict(zip(names, positional)), **args})
    return ToolCall(name, args, tuple(positional))


def _message_body(text: str) -> tuple[str, int]:
    """The message without surrounding whitespace and one Markdown code fence around all of it,
    and the offset of that body in `text`."""
    body = text.strip()
    start = len(text) - len(text.lstrip())
    match = _FENCE.match(body)
    if match is None:
        return body, start
    inner = match.group(1)
    return inner.strip(), start + match.start(1) + len(inner) - len(inner.lstrip())


def _node_offset(source: str, node: ast.AST) -> int | None:
    return _offset_of(source, node.lineno, node.col_offset, True) if hasattr(node, "lineno") else None


def _offset_of(source: str, lineno: int | None, col: int, utf8: bool) -> int:
    """Character offset of (1-based line, column); ast columns count UTF-8 bytes."""
    lines = [line + "\n" for line in source.split("\n")]  # ast counts lines as we do: by "\n"
    if not lineno or lineno > len(lines):
        return len(source)
    line = lines[lineno - 1]
    if utf8:
        col = len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
    return sum(len(x) for x in lines[:lineno - 1]) + min(max(col, 0), len(line))


def _error(text: str, offset: int | None, fmt: str, message: str) -> ParseError:
    if offset is None:
        return ParseError(message, fmt)
    before = text[:offset]
    line = before.count("\n") + 1
    return ParseError(message, fmt, line, offset - (before.rfind("\n") + 1) + 1)


def _short(error: BaseException) -> str:
    return (str(error) or type(error).__name__)[:200]

