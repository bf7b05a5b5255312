"""Tool schemas and argument validation.

A `ToolSchema` is read from a BFCL/Gorilla JSON function doc (`name`, `description`,
`parameters: {type, properties, required}`). `validate_call` checks a `ToolCall` against it and
reports each problem as an `ArgumentError` of a distinct kind: a missing required argument, an
unknown argument, a wrong type, a value out of its allowed range, or positional values that could
not be matched to parameters. Prompt renderings of the same docs live in `seetjax.tools.prompts`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seetjax.tools.calls import ToolCall


class ArgumentErrorKind(enum.Enum):
    MISSING_REQUIRED = "missing_required"
    UNKNOWN_ARGUMENT = "unknown_argument"
    WRONG_TYPE = "wrong_type"
    OUT_OF_RANGE = "out_of_range"
    UNMATCHED_POSITIONAL = "unmatched_positional"


@dataclass(frozen=True)
class ArgumentError:
    kind: ArgumentErrorKind
    function: str
    argument: str | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its Gorilla type name(s) (string, integer, float, boolean, array, dict, any,
    ...; a JSON-schema list of names means any of them), the nested schema of array items or dict
    properties, and optional numeric bounds."""

    name: str
    types: tuple[str, ...]
    required: bool
    default_is_none: bool = False
    items: Mapping[str, Any] | None = None
    properties: Mapping[str, Any] | None = None
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class ToolSchema:
    """A tool's name, description and parameters (in positional order), and its source doc."""

    name: str
    description: str
    params: tuple[ParamSpec, ...]
    doc: Mapping[str, Any]

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def required(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params if p.required)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], param_order: Sequence[str] | None = None,
                 overlay: Mapping[str, Mapping[str, Any]] | None = None) -> ToolSchema:
        """Reads a JSON function doc. `param_order` overrides the doc's property order (the order
        positional arguments bind in); `overlay` (parameter -> spec keys) patches parameter specs
        for validation only, e.g. `{"exponent": {"minimum": -256, "maximum": 256}}`."""
        parameters = doc.get("parameters") or {}
        properties: Mapping[str, Any] = parameters.get("properties") or {}
        required = set(parameters.get("required") or ())
        order = list(param_order) if param_order is not None else list(properties)
        if set(order) != set(properties):
            raise ValueError(f"{doc['name']}: parameter order {order} does not match the doc's "
                             f"properties {list(properties)}")
        params = []
        for name in order:
            spec = {**properties[name], **(overlay or {}).get(name, {})}
            types = spec.get("type", "any")
            params.append(ParamSpec(
                name=name, types=(types,) if isinstance(types, str) else tuple(types),
                required=name in required,
                default_is_none="default" in spec and spec["default"] is None,
                items=spec.get("items"), properties=spec.get("properties"),
                minimum=spec.get("minimum"), maximum=spec.get("maximum")))
        return cls(name=doc["name"], description=doc.get("description", ""),
                   params=tuple(params), doc=doc)


# Gorilla type names -> the Python types a value may have (bool is never a number here, although
# Python makes it an int subclass).
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "str": (str,), "char": (str,),
    "integer": (int,), "int": (int,), "long": (int,),
    "float": (int, float), "number": (int, float), "double": (int, float),
    "boolean": (bool,), "bool": (bool,),
    "array": (list, tuple), "list": (list, tuple), "tuple": (list, tuple),
    "dict": (dict,), "object": (dict,),
}


def validate_call(call: ToolCall, schema: ToolSchema, check_types: bool = True
                  ) -> list[ArgumentError]:
    """Every problem of `call`'s arguments against `schema`; empty when the call is valid.

    Numeric bounds are checked even when `check_types` is False: they keep tools from being asked
    for unbounded work (a power with a huge exponent, a precision of a billion digits).
    """
    errors = []
    fn = schema.name
    if call.positional:
        errors.append(ArgumentError(
            ArgumentErrorKind.UNMATCHED_POSITIONAL, fn, None,
            f"{fn}() got {len(call.positional)} positional value(s) that do not match its "
            f"parameters {list(schema.param_names)}; pass arguments by name"))
    by_name = {p.name: p for p in schema.params}
    for name in call.args:
        if name not in by_name:
            errors.append(ArgumentError(
                ArgumentErrorKind.UNKNOWN_ARGUMENT, fn, name,
                f"{fn}() got an unexpected argument {name!r}; its parameters are "
                f"{list(schema.param_names)}"))
    for spec in schema.params:
        if spec.name not in call.args:
            if spec.required:
                errors.append(ArgumentError(ArgumentErrorKind.MISSING_REQUIRED, fn, spec.name,
                                            f"{fn}() missing required argument {spec.name!r}"))
            continue
        value = call.args[spec.name]
        if check_types:
            problem = _type_problem(value, spec.types, spec.items, spec.properties,
                                    allow_none=not spec.required and spec.default_is_none)
            if problem:
                errors.append(ArgumentError(ArgumentErrorKind.WRONG_TYPE, fn, spec.name,
                                            f"{fn}() argument {spec.name!r} {problem}"))
                continue
        problem = _range_problem(value, spec)
        if problem:
            errors.append(ArgumentError(ArgumentErrorKind.OUT_OF_RANGE, fn, spec.name,
                                        f"{fn}() argument {spec.name!r} {problem}"))
    return errors


def _type_problem(value: Any, types: str | Sequence[str], items: Mapping[str, Any] | None,
                  properties: Mapping[str, Any] | None, allow_none: bool = False,
                  path: str = "") -> str | None:
    """Why `value` is of none of the Gorilla types `types`, or None when it is of one."""
    if value is None and allow_none:
        return None
    names = (types,) if isinstance(types, str) else tuple(types)
    if any(name not in _PYTHON_TYPES for name in names):
        return None  # `any`, and type names we do not know, accept every value
    expected = tuple(t for name in names for t in _PYTHON_TYPES[name])
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        return f"{path}must be {' or '.join(names)}, got {_kind(value)} {_preview(value)}"
    if isinstance(value, (list, tuple)) and items:
        for i, item in enumerate(value):
            problem = _type_problem(item, items.get("type", "any"), items.get("items"),
                                    items.get("properties"), path=f"{path}item {i} ")
            if problem:
                return problem
    if isinstance(value, dict) and properties:
        for key, item in value.items():
            if key not in properties:
                return f"{path}has an unexpected key {key!r}; allowed keys are {list(properties)}"
            sub = properties[key]
            problem = _type_problem(item, sub.get("type", "any"), sub.get("items"),
                                    sub.get("properties"), path=f"{path}key {key!r} ")
            if problem:
                return problem
    return None


def _range_problem(value: Any, spec: ParamSpec) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if spec.minimum is not None and value < spec.minimum:
        return f"must be at least {spec.minimum}, got {_preview(value)}"
    if spec.maximum is not None and value > spec.maximum:
        return f"must be at most {spec.maximum}, got {_preview(value)}"
    return None


def _kind(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            tuple: "array", dict: "dict", type(None): "None"}.get(type(value), type(value).__name__)


def _preview(value: Any, limit: int = 60) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** limit:
        return f"<integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
