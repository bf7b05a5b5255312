"""Safe tool execution on per-episode API instances.

A `ToolExecutor` owns the instances of one episode (nothing is cached in module globals, so nothing
leaks between episodes). A call is resolved by name among the tools available at this point of the
episode, its arguments are validated against the schema, and the bound method is called with
keyword arguments. Model text never reaches `eval` or `exec`: by the time a call gets here it is a
name and a dict of literal values.

Outputs are strings in bfcl_eval's form, so the checker can compare them with ground-truth outputs
exactly as BFCL does: a string result as is, a dict as JSON (its `str` if not serializable),
anything else through `str`, an exception as `Error during execution: <message>`.
"""

from __future__ import annotations

import contextlib
import copy
import decimal
import enum
import functools
import inspect
import json
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from seetjax.tools.calls import ToolCall
from seetjax.tools.schema import ArgumentError, ToolSchema, validate_call

ERROR_PREFIX = "Error during execution: "


class ExecutionErrorKind(enum.Enum):
    UNKNOWN_FUNCTION = "unknown_function"  # no such tool, or not available yet in this episode
    INVALID_ARGUMENTS = "invalid_arguments"  # schema validation failed; nothing was run
    API_EXCEPTION = "api_exception"  # the tool raised
    API_ERROR = "api_error"  # the tool returned {"error": ...}


@dataclass(frozen=True)
class ExecutionResult:
    """What one call produced: the output string the model sees, and the error kind if any."""

    call: ToolCall
    output: str
    error: ExecutionErrorKind | None = None
    argument_errors: tuple[ArgumentError, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


class ToolExecutor:
    """Runs tool calls on the instances of one episode.

    Args:
      instances: class name -> the episode's instance of that API class.
      schemas: class name -> the schemas of that class's tools; only these names can be called.
      available: names callable now (default: all); `reveal` adds more later.
      check_types: validate argument types (bfcl_eval runs ill-typed calls; our environment
        rejects them with a clear error by default).
    """

    def __init__(self, instances: Mapping[str, object], schemas: Mapping[str, Sequence[ToolSchema]],
                 available: Iterable[str] | None = None, check_types: bool = True):
        self.instances = dict(instances)
        self.check_types = check_types
        self._tools: dict[str, tuple[Any, ToolSchema, dict[str, Any]]] = {}
        for class_name, class_schemas in schemas.items():
            instance = self.instances[class_name]
            for schema in class_schemas:
                defaults = _mutable_defaults(type(instance), schema.name)
                self._tools[schema.name] = (getattr(instance, schema.name), schema, defaults)
        self.available: set[str] = set(self._tools if available is None else available)
        unknown = self.available - set(self._tools)
        if unknown:
            raise ValueError(f"available tools without a schema: {sorted(unknown)}")

    @property
    def schemas(self) -> dict[str, ToolSchema]:
        """All tools of the episode (available or not), by name."""
        return {name: schema for name, (_, schema, _) in self._tools.items()}

    def reveal(self, names: Iterable[str]) -> None:
        """Makes held-out tools callable from now on."""
        names = set(names)
        unknown = names - set(self._tools)
        if unknown:
            raise ValueError(f"cannot reveal tools without a schema: {sorted(unknown)}")
        self.available |= names

    def execute(self, call: ToolCall) -> ExecutionResult:
        """Runs one call; every failure becomes an error result, nothing is raised."""
        if call.name not in self.available:
            return ExecutionResult(call, f"{ERROR_PREFIX}function {call.name[:100]!r} is not "
                                         "available", ExecutionErrorKind.UNKNOWN_FUNCTION)
        method, schema, mutable_defaults = self._tools[call.name]
        problems = validate_call(call, schema, self.check_types)
        if problems:
            return ExecutionResult(call, ERROR_PREFIX + "; ".join(p.message for p in problems),
                                   ExecutionErrorKind.INVALID_ARGUMENTS, tuple(problems))
        # Fresh argument objects: an API may keep them in its state, and the call is part of the
        # episode record. Fresh mutable defaults: some APIs mutate a `[]` default, which Python
        # shares across every call in the process.
        kwargs = copy.deepcopy({**mutable_defaults, **call.args})
        # Rendered inside the same context: an mpmath result prints at the precision the tool
        # set, as in bfcl_eval, where nothing restores it between the call and its output.
        with _isolated_numeric_context():
            try:
                result = method(**kwargs)
            except Exception as e:  # noqa: BLE001 - any API failure is an observation for the model
                return ExecutionResult(call, f"{ERROR_PREFIX}{e}", ExecutionErrorKind.API_EXCEPTION)
            try:
                output = render_output(result)
            except Exception as e:  # noqa: BLE001 - e.g. an integer too long to print
                return ExecutionResult(call, f"{ERROR_PREFIX}the result cannot be shown: {e}",
                                       ExecutionErrorKind.API_EXCEPTION)
        error = ExecutionErrorKind.API_ERROR if type(result) is dict and "error" in result else None
        return ExecutionResult(call, output, error)

    def execute_all(self, calls: Iterable[ToolCall]) -> list[ExecutionResult]:
        return [self.execute(call) for call in calls]


OVER_BUDGET = "[truncated: this episode's tool outputs reached their limit of {limit:,} characters]"


class OutputBudget:
    """The tool output one episode may still hold: `cap` passes outputs whole until `limit`
    characters in all, cuts the one that passes it and marks it `OVER_BUDGET`, and gives only
    the mark after that (the calls ran; only what is kept and shown is cut)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def cap(self, result: ExecutionResult) -> ExecutionResult:
        """`result`, its output cut where the episode's outputs pass `limit`."""
        left = self.limit - self.used
        self.used = min(self.limit, self.used + len(result.output))
        if len(result.output) <= left:
            return result
        marker = OVER_BUDGET.format(limit=self.limit)
        return replace(result, output=f"{result.output[:left]} {marker}" if left else marker)


def render_output(result: Any) -> str:
    """A tool result as the string bfcl_eval's executor makes of it (compared by the checker)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


@functools.cache
def _mutable_defaults(cls: type, name: str) -> dict[str, Any]:
    """The list/dict/set defaults of tool `name` of `cls`, checked to be a public method."""
    # Only plain public methods defined by the class are tools: never a dunder, never an attribute
    # reached through an instance field.
    function = inspect.getattr_static(cls, name, None)
    if name.startswith("_") or not inspect.isfunction(function):
        raise ValueError(f"{cls.__name__} has no public method {name!r}")
    return {param: p.default for param, p in inspect.signature(function).parameters.items()
            if isinstance(p.default, (list, dict, set))}


# mpmath's working precision is process-global (the decimal context is per thread): BFCL's MathAPI
# sets it inside a call, so calls running at once in the rollout's threads would compute at each
# other's precision. Tool calls hold this lock while they run; they are short and pure Python, so
# under the GIL the lock costs nothing measurable.
_NUMERIC_STATE = threading.Lock()


@contextlib.contextmanager
def _isolated_numeric_context() -> Iterator[None]:
    """Keeps tools from changing process-wide numeric settings (BFCL's MathAPI sets the decimal
    context precision and mpmath's working precision) or seeing another thread's."""
    with _NUMERIC_STATE:
        mpmath = sys.modules.get("mpmath")
        saved_precision = mpmath.mp.prec if mpmath is not None else None
        try:
            with decimal.localcontext():
                yield
        finally:
            if mpmath is not None:
                mpmath.mp.prec = saved_precision
