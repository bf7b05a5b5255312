"""The augmented environment's actionable hints.

Standard mode shows the API's raw errors. Augmented mode adds a hint to each failed step, built
from the tool schemas and the live state of the episode's API instances (never from the ground
truth): how to write a call, with an example made from an available tool; the nearest available
tool names; which arguments a tool takes, their types and which are required; and, for errors
raised by the APIs, class-specific advice such as the current directory and its contents, the
login a system wants, how to list valid airports, or the call a vehicle needs first.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seetjax.envs.base import StepCode, StepResult
from seetjax.tools.calls import ParseError, ToolCall
from seetjax.tools.executor import ExecutionErrorKind, ExecutionResult, ToolExecutor
from seetjax.tools.schema import ArgumentError, ArgumentErrorKind, ParamSpec, ToolSchema

_EXAMPLE_VALUES = {"string": "text", "str": "text", "integer": 1, "int": 1, "float": 1.0,
                   "number": 1.0, "boolean": True, "bool": True, "array": [], "list": [],
                   "dict": {}, "object": {}}


def step_hint(step: StepResult, executor: ToolExecutor, call_format: str) -> str | None:
    """The hint for a failed step (format or execution error); None for other steps."""
    if step.code == StepCode.FORMAT_ERROR and step.parse_error is not None:
        return format_hint(step.parse_error, executor, call_format)
    if step.code == StepCode.EXECUTION_ERROR:
        hints = [h for r in step.results if not r.ok
                 for h in [result_hint(r, executor, call_format)] if h]
        return " ".join(dict.fromkeys(hints)) or None
    return None


def format_hint(error: ParseError, executor: ToolExecutor, call_format: str) -> str:
    """The expected call format, with an example call of an available tool."""
    example = example_call(_first_available(executor))
    if call_format == "hermes":
        shape = f"one block per call, e.g. {example.to_hermes()}"
    else:
        shape = f"a Python list of calls with keyword arguments, e.g. [{example.to_python()}]"
    where = f" (line {error.line}, column {error.column})" if error.line is not None else ""
    return f"Your message could not be read as tool calls{where}. Write {shape}."


def result_hint(result: ExecutionResult, executor: ToolExecutor, call_format: str) -> str | None:
    """A hint for one failed call."""
    call = result.call
    if result.error == ExecutionErrorKind.UNKNOWN_FUNCTION:
        return unknown_tool_hint(call.name, executor)
    if result.error == ExecutionErrorKind.INVALID_ARGUMENTS:
        schema = executor.schemas[call.name]
        return " ".join(dict.fromkeys(argument_hint(e, schema) for e in result.argument_errors))
    owner = _owner(call.name, executor)
    specific = _CLASS_HINTS.get(owner, _no_hint)(executor.instances[owner], call, result.output)
    return specific or f"Check `{call.name}`'s arguments: {signature(executor.schemas[call.name])}."


def unknown_tool_hint(name: str, executor: ToolExecutor) -> str:
    if name in executor.schemas:
        return f"`{name}` is not available yet in this conversation."
    close = difflib.get_close_matches(name, sorted(executor.available), n=3, cutoff=0.4)
    if close:
        return f"There is no tool `{name}`; did you mean " + " or ".join(
            f"`{c}`" for c in close) + "?"
    return ("There is no tool `" + name + "`; the available tools are "
            + ", ".join(f"`{n}`" for n in sorted(executor.available)) + ".")


def argument_hint(error: ArgumentError, schema: ToolSchema) -> str:
    """What the tool expects, for one argument problem."""
    spec = next((p for p in schema.params if p.name == error.argument), None)
    required = [p.name for p in schema.params if p.required]
    if error.kind == ArgumentErrorKind.MISSING_REQUIRED and spec is not None:
        return (f"`{schema.name}` needs `{spec.name}` ({_type_name(spec)}); its required "
                f"arguments are {_names(required)}.")
    if error.kind == ArgumentErrorKind.UNKNOWN_ARGUMENT:
        close = difflib.get_close_matches(error.argument or "", schema.param_names, n=1)
        guess = f" Did you mean `{close[0]}`?" if close else ""
        return f"`{schema.name}` takes {signature(schema)}.{guess}"
    if error.kind == ArgumentErrorKind.WRONG_TYPE and spec is not None:
        return (f"`{spec.name}` of `{schema.name}` must be {_type_name(spec)}, e.g. "
                f"{spec.name}={_example_value(spec)!r}.")
    if error.kind == ArgumentErrorKind.UNMATCHED_POSITIONAL:
        return f"Pass arguments by name: {signature(schema)}."
    return f"{error.message}; `{schema.name}` takes {signature(schema)}."


def signature(schema: ToolSchema) -> str:
    """`name(a: string, b: integer = optional)`."""
    args = [f"{p.name}: {_type_name(p)}" + ("" if p.required else " (optional)")
            for p in schema.params]
    return f"{schema.name}({', '.join(args)})"


def example_call(schema: ToolSchema) -> ToolCall:
    """A well-formed call of `schema` with placeholder values for its required arguments."""
    return ToolCall(schema.name, {p.name: _example_value(p) for p in schema.params if p.required})


# ---------------------------------------------------------------- class-specific, from live state

def _file_system(fs: Any, call: ToolCall, output: str) -> str | None:
    cwd = fs.pwd().get("current_working_directory", "?")
    contents = fs.ls(a=True).get("current_directory_content", [])
    listed = ", ".join(f"`{c}`" for c in contents[:20]) or "nothing"
    more = f" and {len(contents) - 20} more" if len(contents) > 20 else ""
    return (f"You are in `{cwd}`, which contains {listed}{more}. Paths are relative to it; use "
            "`cd` to move first.")


def _trading(bot: Any, call: ToolCall, output: str) -> str | None:
    if not getattr(bot, "authenticated", True):
        return "You are not logged in: call `trading_login(username=..., password=...)` first."
    if "not found" in output.lower() or "invalid stock symbol" in output.lower():
        return ("Look the symbol up with `get_symbol_by_name(name=...)` or list them with "
                "`get_available_stocks(sector=...)`.")
    if getattr(bot, "market_status", "Open") != "Open" and call.name == "place_order":
        return "The market is closed; check it with `get_current_time()`."
    return None


def _travel(travel: Any, call: ToolCall, output: str) -> str | None:
    text = output.lower()
    if "token" in text:
        return ("Authenticate with `authenticate_travel(...)` and pass the `access_token` it "
                "returns.")
    if "airport" in text:
        return ("`list_all_airports()` lists the valid airport codes; "
                "`get_nearest_airport_by_city(location=...)` finds the one for a city.")
    if "card" in text:
        return "`get_all_credit_cards()` lists the registered cards and their ids."
    return None


def _vehicle(car: Any, call: ToolCall, output: str) -> str | None:
    needed = []
    unlocked = [d for d, s in getattr(car, "doorStatus", {}).items() if s == "unlocked"]
    if call.name == "startEngine" or "engine" in output.lower():
        if unlocked:
            needed.append(f"`lockDoors(unlock=False, door={unlocked!r})`")
        if getattr(car, "brakePedalStatus", "pressed") != "pressed" or getattr(
                car, "_brakePedalForce", 1000.0) != 1000.0:
            needed.append("`pressBrakePedal(pedalPosition=1.0)`")
        if getattr(car, "engine_state", "running") != "running" and call.name != "startEngine":
            needed.append("`startEngine(ignitionMode='START')`")
    if "fuel" in output.lower():
        needed.append("`fillFuelTank(fuelAmount=...)`")
    if not needed:
        return None
    return "Call " + ", then ".join(needed) + f" before `{call.name}`."


def _login_hint(attribute: str, logged_out: Callable[[Any], bool], login: str) -> Callable:
    def hint(api: Any, call: ToolCall, output: str) -> str | None:
        if logged_out(getattr(api, attribute, None)):
            return f"Nobody is logged in: call `{login}` first."
        return None
    return hint


def _no_hint(api: Any, call: ToolCall, output: str) -> str | None:
    return None


_CLASS_HINTS: Mapping[str, Callable[[Any, ToolCall, str], str | None]] = {
    "GorillaFileSystem": _file_system,
    "TradingBot": _trading,
    "TravelAPI": _travel,
    "VehicleControlAPI": _vehicle,
    "TwitterAPI": _login_hint("authenticated", lambda v: v is False,
                              "authenticate_twitter(username=..., password=...)"),
    "TicketAPI": _login_hint("current_user", lambda v: v is None,
                             "ticket_login(username=..., password=...)"),
    "MessageAPI": _login_hint("current_user", lambda v: v is None, "message_login(user_id=...)"),
}


# ---------------------------------------------------------------- helpers

def _owner(tool: str, executor: ToolExecutor) -> str:
    return next(c for c, instance in executor.instances.items()
                if callable(getattr(type(instance), tool, None)))


def _first_available(executor: ToolExecutor) -> ToolSchema:
    # A retrieved toolset may offer none of the task's tools: the example is then any tool's.
    names = executor.available or executor.schemas
    name = min(names, key=lambda n: (len(executor.schemas[n].required), n))
    return executor.schemas[name]


def _type_name(spec: ParamSpec) -> str:
    return " or ".join(spec.types)


def _example_value(spec: ParamSpec) -> Any:
    return next((_EXAMPLE_VALUES[t] for t in spec.types if t in _EXAMPLE_VALUES), "value")


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) if names else "none"
