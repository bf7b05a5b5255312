"""Argument validation: distinct error kinds, nested types, bounds, and BFCL's ground truth."""

import inspect

import pytest

from seetjax.envs.bfcl.data import CATEGORIES, MULTI_TURN_CLASSES, api_class, class_schemas, load_tasks
from seetjax.tools.calls import ToolCall
from seetjax.tools.schema import ArgumentErrorKind, ToolSchema, validate_call

DOC = {
    "name": "book",
    "description": "Book a trip.",
    "parameters": {
        "type": "dict",
        "properties": {
            "city": {"type": "string", "description": "Where."},
            "nights": {"type": "integer", "description": "How long."},
            "budget": {"type": "float", "description": "Max spend.", "default": None},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "extra": {"type": "dict", "properties": {"note": {"type": "string"}}},
            "flexible": {"type": "boolean", "description": "Any dates.", "default": False},
            "anything": {"type": "any"},
        },
        "required": ["city", "nights"],
    },
}
SCHEMA = ToolSchema.from_doc(DOC, overlay={"nights": {"minimum": 1, "maximum": 30}})


def kinds(args, check_types=True, positional=()):
    return [e.kind for e in validate_call(ToolCall("book", args, positional), SCHEMA, check_types)]


def test_valid_calls_have_no_errors():
    assert kinds({"city": "Rome", "nights": 3}) == []
    assert kinds({"city": "Rome", "nights": 3, "budget": 12, "tags": ["a"], "extra": {"note": "x"},
                  "flexible": True, "anything": {"a": [1]}}) == []
    assert kinds({"city": "Rome", "nights": 3, "budget": None}) == []  # documented default None


def test_each_problem_is_its_own_kind():
    assert kinds({"nights": 3}) == [ArgumentErrorKind.MISSING_REQUIRED]
    assert kinds({"city": "Rome", "nights": 3, "stars": 5}) == [ArgumentErrorKind.UNKNOWN_ARGUMENT]
    assert kinds({"city": 7, "nights": 3}) == [ArgumentErrorKind.WRONG_TYPE]
    assert kinds({"city": "Rome", "nights": 31}) == [ArgumentErrorKind.OUT_OF_RANGE]
    assert kinds({"city": "Rome", "nights": 3}, positional=("x",)) == [
        ArgumentErrorKind.UNMATCHED_POSITIONAL]
    assert sorted(kinds({"stars": 5}), key=lambda k: k.value) == [
        ArgumentErrorKind.MISSING_REQUIRED, ArgumentErrorKind.MISSING_REQUIRED,
        ArgumentErrorKind.UNKNOWN_ARGUMENT]


@pytest.mark.parametrize("args", [
    {"city": "Rome", "nights": True},  # a bool is not an integer here
    {"city": "Rome", "nights": 3.0},
    {"city": "Rome", "nights": 3, "budget": "cheap"},
    {"city": "Rome", "nights": 3, "tags": ["a", 1]},
    {"city": "Rome", "nights": 3, "tags": "a"},
    {"city": "Rome", "nights": 3, "extra": {"note": 1}},
    {"city": "Rome", "nights": 3, "extra": {"other": "x"}},
    {"city": "Rome", "nights": 3, "flexible": None},  # default False: None is not allowed
    {"city": None, "nights": 3},
])
def test_wrong_types(args):
    assert kinds(args) == [ArgumentErrorKind.WRONG_TYPE]


def test_messages_name_the_function_and_argument():
    [error] = validate_call(ToolCall("book", {"city": "Rome", "nights": "two"}), SCHEMA)
    assert error.function == "book" and error.argument == "nights"
    assert str(error) == "book() argument 'nights' must be integer, got string 'two'"


def test_without_type_checks_bounds_still_hold():
    assert kinds({"city": 7, "nights": "x"}, check_types=False) == []
    assert kinds({"city": "Rome", "nights": 10**9}, check_types=False) == [ArgumentErrorKind.OUT_OF_RANGE]


def test_param_order_must_cover_the_doc():
    with pytest.raises(ValueError, match="does not match"):
        ToolSchema.from_doc(DOC, param_order=["city"])


def test_bfcl_schemas_bind_positionals_in_python_signature_order():
    for class_name in MULTI_TURN_CLASSES:
        cls = api_class(class_name)
        for schema in class_schemas(class_name):
            signature = inspect.signature(getattr(cls, schema.name))
            assert schema.param_names == tuple(p for p in signature.parameters if p != "self")
            required = {p for p, v in signature.parameters.items()
                        if p != "self" and v.default is inspect.Parameter.empty}
            assert schema.required == required


def test_every_ground_truth_call_validates_strictly():
    for category in CATEGORIES:
        for task in load_tasks(category):
            schemas = task.schemas
            for calls in task.ground_truth:
                for call in calls:
                    assert validate_call(call, schemas[call.name]) == [], (task.id, call)


def test_safety_bounds_on_unbounded_work():
    math = {s.name: s for s in class_schemas("MathAPI")}
    [error] = validate_call(ToolCall("power", {"base": 10, "exponent": 10**12}), math["power"])
    assert error.kind is ArgumentErrorKind.OUT_OF_RANGE and "at most 256" in error.message
    assert validate_call(ToolCall("square_root", {"number": 2, "precision": 10**9}),
                         math["square_root"])[0].kind is ArgumentErrorKind.OUT_OF_RANGE
