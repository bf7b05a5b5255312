"""BFCL's official decoding of a model's multi-turn text, reproduced without evaluating anything.

bfcl_eval reads a prompting model's multi-turn reply with `default_decode_execute_prompting`: it
strips "`", newlines and spaces at both ends, wraps the text in `[...]` where a bracket is missing,
reads it with `ast.parse`, turns each call into `{name: {keyword: value}}` (`resolve_ast_call` /
`resolve_ast_by_type`: positional arguments dropped, bare names become strings, `...` becomes
"...", a subscript or a call without keywords becomes its source text, a call with keywords a
nested `{name: {...}}`, `+x`, `~x` and `not x` all negate x, a binary expression is `eval`ed), then
renders each call as a string (`decoded_output_to_execution_list`) that its executor `eval`s.

`decode_official` follows the same steps and gives the calls bfcl_eval's executor would receive:
the keyword arguments its `eval` of each rendered string would pass (tuples stay tuples, top-level
dict keys become strings and nested ones stay as they are, `{}` fails, a dict whose values are all
dicts is rendered as a call). The rendered string is what is read: a dict key can close its quote
or comment out the rest (`#`), and `**x` (the keyword None) renders `f(None=...)`, which the
executor cannot run. Where bfcl_eval would compute or run something of the model's (a binary
expression while decoding, a nested or second call in the rendered string), the answer is a
`ParseError` that says so: nothing here is ever evaluated. Values keep the bounds of
`seetjax.tools.tool_call`, and complex and bytes constants, which have no JSON form, are refused
(bfcl_eval would pass them on). Those refusals are `ParseError`s with `call_made` (bfcl_eval reads
calls there: its relevance rules count one), unless bfcl_eval fails elsewhere in the text: then,
as for any text it cannot decode, a `ParseError`, or `[]` for text that attempts no call (prose):
bfcl_eval ends the turn on either, and so does the environment. A binary expression with a name in
it fails there (its `eval` knows no name of the model's); one of literals is taken to succeed
(residue: one Python refuses, `1 / 0`, fails there and is a call made here; one calling a Python
builtin, `len('ab') + 1`, succeeds there and fails here).

For single-turn entries bfcl_eval stops before rendering (`default_decode_ast_prompting`) and
judges the decoded values: `decode_official_ast` gives those (same steps, same refusals to
evaluate).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from seetjax.tools.calls import _PY_CALL_ANYWHERE, _PY_CALL_START, MAX_MESSAGE_CHARS, _literal
from seetjax.tools.parsing import (
    ParamNames,
    ParseError,
    Reject,
    message_body,
    scalar_problem,
    short_error,
)
from seetjax.tools.tool_call import MAX_CONTAINER_ITEMS, MAX_STRING_CHARS, MAX_VALUE_DEPTH, ToolCall

FORMAT = "official"
# What `repr` writes for the values bfcl_eval passes on: anything else in a rendered argument is
# code its executor's `eval` would run.
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.UnaryOp, ast.USub, ast.Load)
_EXCERPT = 80


class _Evaluates(Reject):
    """bfcl_eval would compute or run part of the model's text here."""


class _Unsupported(Reject):
    """bfcl_eval's decoder raises here (the message is a decode failure there too)."""


def decode_official(text: str, schemas: Mapping[str, ParamNames] | None = None,
                    max_chars: int = MAX_MESSAGE_CHARS) -> list[ToolCall] | ParseError:
    """The calls bfcl_eval's executor would run for `text` (see the module docstring).

    `schemas` is accepted for the signature shared with `parse_tool_calls`; bfcl_eval drops
    positional arguments, so they are never mapped to names. Never raises.
    """
    del schemas
    return _guarded(text, max_chars, rendered=True)


def decode_official_ast(text: str, schemas: Mapping[str, ParamNames] | None = None,
                        max_chars: int = MAX_MESSAGE_CHARS) -> list[ToolCall] | ParseError:
    """The calls bfcl_eval's single-turn decoding (`default_decode_ast_prompting`, whose calls
    its AST checker judges) reads in `text`: `decode_official`'s reading without the rendering
    for an executor, so values stay as decoded (a nested call with keywords is a `{name: {...}}`
    dict; `{}`, dicts of dicts and non-string dict keys stay). Arithmetic, which bfcl_eval
    evaluates, is a `ParseError` here too. Never raises."""
    del schemas
    return _guarded(text, max_chars, rendered=False)


def _guarded(text: str, max_chars: int, rendered: bool) -> list[ToolCall] | ParseError:
    if not isinstance(text, str):
        return ParseError(f"expected a string message, got {type(text).__name__}", FORMAT)
    if len(text) > max_chars:
        return ParseError(f"message too long ({len(text)} characters; limit {max_chars})", FORMAT)
    try:
        return _decode(text, rendered)
    except _Unsupported as e:
        if _attempts_call(text):
            return ParseError(e.message, FORMAT)
        return []  # prose: bfcl_eval fails to decode it and ends the turn, as on no call
    except Reject as e:  # bfcl_eval decodes calls here; it computes or passes a value we refuse
        return ParseError(e.message, FORMAT, call_made=True)
    except (RecursionError, MemoryError, ValueError, TypeError, OverflowError) as e:
        return ParseError(f"cannot decode the message: {short_error(e)}", FORMAT)


def is_evaluation_error(error: ParseError) -> bool:
    """Whether `error` is where bfcl_eval would have evaluated part of the text."""
    return error.fmt == FORMAT and error.message.startswith("the official decoder would")


def official_call_string(call: ToolCall) -> str:
    """A call as bfcl_eval's `decoded_output_to_execution_list` writes it (`name(a=1, b='x')`)."""
    return f"{call.name}({', '.join(f'{k}={_render(v)}' for k, v in call.args.items())})"


# ----------------------------------------------------------------------------------------------


def _decode(text: str, rendered: bool) -> list[ToolCall]:
    body = text.strip("`\n ")
    if not body.startswith("["):
        body = "[" + body
    if not body.endswith("]"):
        body = body + "]"
    body = body.strip().strip("'")
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError as e:
        raise _Unsupported(f"invalid syntax: {e.msg} (line {e.lineno}, column {e.offset})") from None
    node = tree.body
    if isinstance(node, ast.Call):
        elements = [node]
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        elements = node.elts
    else:
        raise _Unsupported(f"the message is {_kind(node)}, not a list of calls")
    decoded, refused = [], []
    for element in elements:
        if not isinstance(element, ast.Call):
            raise _Unsupported(f"the list holds {_kind(element)}, not a call: `{_source(element)}`")
        decoded.append(_resolve_call(element, 0, refused))
    if refused:  # bfcl_eval decodes the whole text: no part of it fails there
        raise refused[0]
    if rendered:
        return [_executed_call(name, args) for name, args in decoded]
    # bfcl_eval's keywords as they are (`**x` is the keyword None, a parameter no doc has).
    return [ToolCall(name, {str(k): _plain(v) for k, v in args.items()}) for name, args in decoded]


def _resolve_call(node: ast.Call, depth: int, refused: list[Reject]
                  ) -> tuple[str, dict[Any, Any]]:
    """bfcl_eval's `resolve_ast_call`: the dotted name and the keyword arguments (positional ones
    dropped; `**x` becomes a keyword named None). Values refused here are added to `refused`."""
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    args = {}
    for keyword in node.keywords:
        args[keyword.arg] = _resolve(keyword.value, depth + 1, refused)
    return ".".join(reversed(parts)), args


class _Nested(dict):
    """A call with keywords inside an argument: bfcl_eval's `{name: {keyword: value}}`."""


def _resolve(node: ast.AST | None, depth: int, refused: list[Reject]) -> Any:
    """bfcl_eval's `resolve_ast_by_type`, minus its `eval`s. A value bfcl_eval reads and we
    refuse (arithmetic, past the bounds) is added to `refused` and read as None: the rest of the
    text is still read, as a part bfcl_eval cannot decode decides the outcome (`_Unsupported`)."""
    try:
        return _resolve_node(node, depth, refused)
    except _Unsupported:
        raise
    except Reject as e:
        refused.append(e)
        return None


def _resolve_node(node: ast.AST | None, depth: int, refused: list[Reject]) -> Any:
    if depth > MAX_VALUE_DEPTH + 1:
        raise Reject(f"value nested deeper than {MAX_VALUE_DEPTH} levels")
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else _scalar(node.value)
    if isinstance(node, ast.UnaryOp):
        # bfcl_eval negates the operand's `.value` whatever the operator: `+5`, `~5`, `not 5`
        # all give -5; an operand without a constant value fails.
        operand = node.operand
        if not isinstance(operand, ast.Constant):
            raise _Unsupported(f"`{_source(node)}`: the official decoder only negates constants")
        if type(operand.value) not in (int, float, bool, complex):
            raise _Unsupported(f"`{_source(node)}`: bad operand type for unary -")
        return _scalar(-operand.value)
    if isinstance(node, (ast.List, ast.Tuple, ast.Dict)):
        items = len(node.keys if isinstance(node, ast.Dict) else node.elts)
        if items > MAX_CONTAINER_ITEMS:
            raise Reject(f"a value with {items} items (limit {MAX_CONTAINER_ITEMS})")
    if isinstance(node, ast.List):
        return [_resolve(e, depth + 1, refused) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values):
            key, item = _resolve(k, depth + 1, refused), _resolve(v, depth + 1, refused)
            try:
                out[key] = item
            except TypeError:
                raise _Unsupported(f"unhashable dict key `{_source(k)}`") from None
        return out
    if isinstance(node, ast.BinOp):
        name = next((n.id for n in ast.walk(node) if isinstance(n, ast.Name)), None)
        if name is not None:  # a name of the model's own: no global of bfcl_eval's decoder
            raise _Unsupported(f"`{_source(node)}`: bfcl_eval's decoder evaluates it and fails "
                               f"on the undefined name {name}")
        raise _Evaluates(f"the official decoder would evaluate the expression `{_source(node)}`; "
                         "seetjax never evaluates model text")
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        if not node.keywords:
            return _scalar(_unparse(node))
        name, args = _resolve_call(node, depth, refused)
        return _Nested({name: args})
    if isinstance(node, ast.Tuple):
        return tuple(_resolve(e, depth + 1, refused) for e in node.elts)
    if isinstance(node, ast.Lambda):
        raise _Unsupported(f"`{_source(node)}`: the official decoder fails on a lambda")
    if isinstance(node, ast.Subscript):
        return _scalar(_unparse(node.value) + "[" + _unparse(node.slice) + "]")
    raise _Unsupported(f"unsupported {_kind(node)} `{_source(node)}`")


def _plain(value: Any) -> Any:
    """A decoded value with its nested calls as the plain dicts bfcl_eval builds."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _scalar(value: Any) -> Any:
    if isinstance(value, (bytes, complex)):
        raise Reject(f"a {type(value).__name__} constant is not a JSON-like literal")
    problem = scalar_problem(value)
    if problem is not None:
        raise Reject(problem)
    return value


def _render(value: Any) -> str:
    """bfcl_eval's `parse_nested_value`: a dict whose values are all dicts is written as a call."""
    if isinstance(value, dict):
        if all(isinstance(v, dict) for v in value.values()):
            if not value:
                raise _Unsupported("an empty dict argument: the official decoder fails on `{}` "
                                   "(it takes it for a call with no name)")
            name = next(iter(value))
            args = value[name]
            return f"{name}({', '.join(f'{k}={_render(v)}' for k, v in args.items())})"
        return "{" + ", ".join(f"'{k}': {_render(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _executed_call(name: str, args: dict[Any, Any]) -> ToolCall:
    """The call bfcl_eval's executor makes of the rendered `name(k=v, ...)`: the string its `eval`
    runs is read back whole, literals only. Rendered dict keys can end their quotes or comment
    out the rest of the string (`#`), so what runs is the string's reading, not `args`."""
    parts = []
    for key, value in args.items():
        rendered = _render(value)
        if len(rendered) > 4 * MAX_STRING_CHARS:
            raise Reject(f"an argument of {len(rendered)} characters")
        parts.append(f"{key}={rendered}")
    source = f"{name}({', '.join(parts)})"
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        raise _Unsupported(f"bfcl_eval renders the call as {source[:_EXCERPT]}, which its "
                           "executor cannot read") from None
    if (not isinstance(node, ast.Call) or _source(node.func) != name or node.args
            or any(k.arg is None for k in node.keywords)):
        raise _Evaluates(f"the official decoder would have its executor run "
                         f"`{source[:_EXCERPT]}`, not the call it decoded; seetjax never "
                         "evaluates model text")
    keywords = [k.arg for k in node.keywords]
    if len(set(keywords)) < len(keywords):
        raise _Unsupported(f"bfcl_eval renders the call as {source[:_EXCERPT]}, which repeats "
                           "a keyword: its executor cannot run it")
    values = {}
    for keyword in node.keywords:
        nested = next((n for n in ast.walk(keyword.value) if isinstance(n, ast.Call)), None)
        if nested is not None:
            raise _Evaluates(f"the official decoder would execute the nested call "
                             f"`{_source(nested)}` in the argument {keyword.arg}; seetjax never "
                             "evaluates model text")
        if not all(isinstance(n, _LITERAL_NODES) for n in ast.walk(keyword.value)):
            raise _Evaluates(f"the official decoder would evaluate `{_source(keyword.value)}` in "
                             f"the argument {keyword.arg}; seetjax never evaluates model text")
        values[keyword.arg] = _literal(keyword.value, source, 0, string_keys=False)
    return ToolCall(name, values)


def _attempts_call(text: str) -> bool:
    """calls.py's test for a message that attempts python-format calls at all."""
    for body in (message_body(text)[0], text.strip("`\n ").strip()):
        unwrapped = body.lstrip("'\"( \t")  # quoted or parenthesised calls are attempts too
        if (_PY_CALL_START.match(unwrapped) or _PY_CALL_ANYWHERE.search(body)
                or (body.startswith("[") and body.endswith("]"))):
            return True
    return False


def _unparse(node: ast.AST) -> str:
    text = ast.unparse(node)
    if len(text) > MAX_STRING_CHARS:
        raise Reject(f"a string of {len(text)} characters (limit {MAX_STRING_CHARS})")
    return text


def _source(node: ast.AST | None) -> str:
    if node is None:
        return "**"
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError, TypeError, AttributeError):
        return type(node).__name__
    return text if len(text) <= _EXCERPT else text[:_EXCERPT - 3] + "..."


def _kind(node: ast.AST | None) -> str:
    return "`**` unpacking" if node is None else f"an expression of kind {type(node).__name__}"
