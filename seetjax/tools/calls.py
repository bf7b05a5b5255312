"""Reading model text as `ToolCall`s (seetjax.tools.tool_call): `parse_tool_calls` for any format,
and the python-format parser. The hermes and json parsers are in seetjax.tools.json_calls, what
every parser shares (ParseError, bounds on values) in seetjax.tools.parsing.

Formats: ``python``, BFCL's prompting format ``[f(a=1), g(b='x')]`` (a single ``f(a=1)`` too);
``hermes``, Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, any
number per message, text around them allowed; ``json``, an object ``{"name": ..., "arguments":
{...}}`` or a list of them. Values are literals only: Python text is read with `ast.parse` and
every node is checked to be a literal (string, number, bool, None, list, tuple, dict; a tuple
stays a tuple); nothing is evaluated. Positional arguments get their parameter names from the
tool's schema (BFCL's own decoder drops them; `seetjax.envs.bfcl.official` decodes as BFCL does).
A dotted tool name (`math.factorial(n=5)`, as BFCL's single-turn tools are named) is read only
where `schemas` documents it; any other attribute access is refused.

Parsers never raise on bad model text: they return a `ParseError` that says what is wrong and where.
A message that does not attempt a call at all (plain prose) parses to an empty list: the turn ends.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any, Literal

from seetjax.tools.json_calls import parse_hermes_calls, parse_json_calls
from seetjax.tools.parsing import (
    ParamNames,
    ParseError,
    Reject,
    error_at,
    message_body,
    scalar_problem,
    short_error,
)
from seetjax.tools.tool_call import MAX_CONTAINER_ITEMS, MAX_VALUE_DEPTH, ToolCall, py_repr

CallFormat = Literal["python", "hermes", "json", "auto"]

MAX_MESSAGE_CHARS = 65_536
# A message attempts python-format calls when it starts like one, `[name(` or `name(` (no space
# before the parenthesis, so prose such as "Sorry (I cannot)..." stays prose).
_PY_CALL_START = re.compile(r"\[?\s*[A-Za-z_][\w.]*\(")
_PY_CALL_ANYWHERE = re.compile(r"\[\s*[A-Za-z_][\w.]*\(")


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
        stripped = message_body(text)[0]
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
    body, start = message_body(text)
    if body in ("", "[]"):
        return []
    # A bracketed message is a call list, however garbled; otherwise it must start like a call.
    if not _PY_CALL_START.match(body) and not (body.startswith("[") and body.endswith("]")):
        found = _PY_CALL_ANYWHERE.search(body)
        if found is None:
            return []  # prose: no call attempted
        return error_at(text, start + found.start(), "python",
                      "text before the call list; the message must be only the list of calls")
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError as e:
        offset = _offset_of(body, e.lineno, e.offset - 1 if e.offset else 0, utf8=False)
        return error_at(text, start + offset, "python", f"invalid syntax: {e.msg}")
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return ParseError(f"cannot read the message as Python literals: {short_error(e)}", "python")
    node = tree.body
    elements = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls = []
    try:
        for element in elements:
            calls.append(_python_call(element, body, schemas))
    except Reject as e:
        return error_at(text, None if e.offset is None else start + e.offset, "python", e.message)
    return calls


# ----------------------------------------------------------------------------------------------
# python format


def _python_call(node: ast.AST, source: str, schemas: Mapping[str, ParamNames] | None) -> ToolCall:
    if not isinstance(node, ast.Call):
        raise Reject(f"expected a function call, found {_describe(node)}", _node_offset(source, node))
    name = _tool_name(node.func, schemas)
    if name is None:
        raise Reject(f"the called object must be a plain tool name, found {_describe(node.func)}",
                      _node_offset(source, node.func))
    args: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise Reject("`**` unpacking is not allowed; pass arguments by name",
                          _node_offset(source, keyword))
        args[keyword.arg] = _literal(keyword.value, source, 0)
    positional = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise Reject("`*` unpacking is not allowed", _node_offset(source, arg))
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


def _literal(node: ast.AST, source: str, depth: int, string_keys: bool = True) -> Any:
    """The value of a literal node; anything else (names, calls, operators) is rejected. Dict
    keys must be strings unless `string_keys` is False (then any hashable literal)."""
    if depth > MAX_VALUE_DEPTH:
        raise Reject(f"value nested deeper than {MAX_VALUE_DEPTH} levels", _node_offset(source, node))
    if isinstance(node, ast.Constant):
        return _constant(node.value, node, source)
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd))
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float)):
        value = _constant(node.operand.value, node, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple, ast.Dict)):
        items = len(node.keys if isinstance(node, ast.Dict) else node.elts)
        if items > MAX_CONTAINER_ITEMS:
            raise Reject(f"a value with {items} items (limit {MAX_CONTAINER_ITEMS})",
                          _node_offset(source, node))
    if isinstance(node, (ast.List, ast.Tuple)):
        # A tuple stays a tuple, as bfcl_eval's decoder keeps it: a tool that stores it has a
        # state that differs from one storing the list (its state check compares with `!=`).
        items = [_literal(e, source, depth + 1, string_keys) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                raise Reject("`**` unpacking is not allowed in a dict", _node_offset(source, v))
            if string_keys and not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                raise Reject(f"dict keys must be strings, found {_describe(k)}", _node_offset(source, k))
            key = _literal(k, source, depth + 1, string_keys)
            value = _literal(v, source, depth + 1, string_keys)
            try:
                out[key] = value
            except TypeError:  # a tuple key holding a list or dict
                raise Reject("an unhashable dict key", _node_offset(source, k)) from None
        return out
    if isinstance(node, ast.Name):
        hint = {"true": "True", "false": "False", "null": "None"}.get(node.id)
        advice = f"write {hint}" if hint else f"quote strings, e.g. '{node.id}'"
        raise Reject(f"`{node.id}` is a bare name, not a literal; {advice}", _node_offset(source, node))
    raise Reject(f"{_describe(node)} is not allowed; arguments must be literals",
                  _node_offset(source, node))


def _constant(value: Any, node: ast.AST, source: str) -> Any:
    """`value`, the constant of `node`, if it is a bounded JSON-like scalar."""
    problem = scalar_problem(value)
    if problem is None and not (value is None or isinstance(value, (str, bool, int, float))):
        problem = f"a {type(value).__name__} constant is not a JSON-like literal"
    if problem is not None:
        raise Reject(problem, _node_offset(source, node))
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"attribute access `.{node.attr}`"
    if isinstance(node, ast.Call):
        return "a call inside the arguments"
    if isinstance(node, ast.Constant):
        return f"the constant {py_repr(node.value)}"[:80]
    return f"an expression of kind {type(node).__name__}"


def _bind(name: str, args: dict[str, Any], positional: list[Any],
          schemas: Mapping[str, ParamNames] | None) -> ToolCall:
    """Maps positional values to parameter names when the schema makes it unambiguous."""
    if positional and schemas is not None and name in schemas:
        names = schemas[name].param_names[:len(positional)]
        if len(names) == len(positional) and not set(names) & set(args):
            return ToolCall(name, {**dict(zip(names, positional)), **args})
    return ToolCall(name, args, tuple(positional))


def _node_offset(source: str, node: ast.AST) -> int | None:
    # Reads `source` up to the node: only ever called for the one node a parse fails on, so
    # parsing stays linear in the message.
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
