"""What every tool-call parser shares (seetjax.tools.calls, json_calls, and BFCL's official
decoding in seetjax.envs.bfcl.official): the `ParseError` a parser returns, the `Reject` raised
inside one, the message body, the bounds on scalar values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from seetjax.tools.tool_call import INT_BOUND, MAX_INT_DIGITS, MAX_STRING_CHARS

_FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)


class ParamNames(Protocol):
    """Anything that knows a tool's parameter names in positional order (a `ToolSchema`)."""
    @property
    def param_names(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class ParseError:
    """Why a message could not be read as tool calls, and where (1-based line and column).

    `call_made`: the message is well-formed calls that a value of is refused (arithmetic, a
    value past the bounds): bfcl_eval's decoder reads calls there, so its relevance rules count
    a call made.
    """

    message: str
    fmt: str
    line: int | None = None
    column: int | None = None
    call_made: bool = False

    def __str__(self) -> str:
        where = f" (line {self.line}, column {self.column})" if self.line is not None else ""
        return f"could not parse {self.fmt} tool calls{where}: {self.message}"


class Reject(Exception):
    """A value or call that is not allowed, with the character offset of the culprit."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.message, self.offset = message, offset


def scalar_problem(value: Any) -> str | None:
    """Why a scalar argument value is out of bounds, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "numbers must be finite"
    if isinstance(value, int) and not isinstance(value, bool) and not -INT_BOUND < value < INT_BOUND:
        return f"an integer of more than {MAX_INT_DIGITS} digits"
    if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
        return f"a string of {len(value)} characters (limit {MAX_STRING_CHARS})"
    return None


def message_body(text: str) -> tuple[str, int]:
    """The message without surrounding whitespace and one Markdown code fence around all of it,
    and the offset of that body in `text`."""
    body = text.strip()
    start = len(text) - len(text.lstrip())
    match = _FENCE.match(body)
    if match is None:
        return body, start
    inner = match.group(1)
    return inner.strip(), start + match.start(1) + len(inner) - len(inner.lstrip())


def error_at(text: str, offset: int | None, fmt: str, message: str) -> ParseError:
    """A ParseError located at character `offset` of `text` (None: no location)."""
    if offset is None:
        return ParseError(message, fmt)
    before = text[:offset]
    line = before.count("\n") + 1
    return ParseError(message, fmt, line, offset - (before.rfind("\n") + 1) + 1)


def short_error(error: BaseException) -> str:
    return (str(error) or type(error).__name__)[:200]
