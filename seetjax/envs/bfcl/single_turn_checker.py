"""BFCL's single-turn check with bfcl_eval's semantics (its `ast_checker` on Python entries, and
its eval runner's relevance rules), on decoded calls.

Irrelevance entries pass when the reply makes no call (nothing decoded, or an empty list);
live_relevance entries pass when it makes at least one. A reply whose calls bfcl_eval's decoder
reads but one of whose values we refuse (arithmetic, a value past the bounds: a `ParseError`
with `call_made`) makes a call, as there. A reply that cannot be decoded fails an AST entry.
An AST entry compares the calls with its possible answers (`ExpectedCall`s):

- simple: exactly one call, judged against the entry's first doc and first expected call;
  multiple: as many calls as expected (one), judged against the expected function's doc;
  parallel and parallel_multiple: as many calls as expected, order free: each expected call, in
  the answer's order, takes the first call not taken yet that passes it (bfcl_eval's greedy
  matching, not a maximum matching), and fails the entry when none does.
- A call passes an expected call when its name is the doc's (with `underscore_to_dot`, the name
  with "_" for "." as bfcl_eval expects of function-calling APIs), every required parameter is
  given, every given parameter is in the doc and in the answer, each value has the doc's type and
  is among the accepted values, and every answer parameter left out accepts "" (optional).
- Types (bfcl_eval's Python table: string, integer, float, boolean, array, tuple, dict, and `any`
  read as string) are exact (`True` is no integer), except that an int is read as a float for a
  float parameter and a tuple as a list for a tuple parameter. Array and tuple items are checked
  one level deep against the item type. A value whose type is that of the first non-"" accepted
  value is accepted as written where the doc's type differs ("a variable" to bfcl_eval), and is
  then compared with plain Python equality.
- Values: strings compared after bfcl_eval's standardisation (spaces and `,./-_*^` removed,
  lower case, `'` read as `"`); lists element by element, standardising string elements;
  dicts key by key against each accepted dict (unknown keys fail, a left-out key must accept "");
  lists of dicts dict by dict, in order; anything else with Python equality (`1 == 1.0 == True`).

bfcl_eval drops positional arguments when it decodes; they are ignored here too. Error types are
bfcl_eval's (`simple_function_checker:missing_required`, `value_error:string`, ...).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.envs.bfcl.single_turn import IRRELEVANCE, RELEVANCE, ExpectedCall, SingleTurnTask
from seetjax.tools.calls import ParseError, ToolCall

DECODER_FAILED = "ast_decoder:decoder_failed"
IRRELEVANCE_ERROR = "irrelevance_error:decoder_success"
RELEVANCE_ERROR = "relevance_error:decoder_failed"

# bfcl_eval's Python type table (`any` is checked as a string).
_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool,
                           "array": list, "tuple": list, "dict": dict, "any": str}
_STANDARDISED_AWAY = re.compile(r"[ ,./\-_*^]")


@dataclasses.dataclass(frozen=True)
class SingleTurnResult:
    """One entry's verdict, and why it failed (a bfcl_eval error type and our message)."""

    task_id: str
    category: str
    valid: bool
    error_type: str | None = None
    message: str = ""


@dataclasses.dataclass(frozen=True)
class _Problem:
    error_type: str
    message: str


def check(task: SingleTurnTask, decoded: Sequence[ToolCall] | ParseError,
          underscore_to_dot: bool = False) -> SingleTurnResult:
    """The verdict on a reply to `task` decoded to `decoded` (see the module docstring)."""
    called = decoded.call_made if isinstance(decoded, ParseError) else bool(decoded)
    if task.category in IRRELEVANCE:
        problem = _Problem(IRRELEVANCE_ERROR, "a call was made where no function fits") if called \
            else None
    elif task.category in RELEVANCE:
        problem = None if called else _Problem(RELEVANCE_ERROR, "no call was made")
    elif isinstance(decoded, ParseError):
        problem = _Problem(DECODER_FAILED, str(decoded))
    else:
        problem = _check_calls(task, list(decoded), underscore_to_dot)
    if problem is None:
        return SingleTurnResult(task.id, task.category, True)
    return SingleTurnResult(task.id, task.category, False, problem.error_type, problem.message)


def _check_calls(task: SingleTurnTask, calls: list[ToolCall],
                 underscore_to_dot: bool) -> _Problem | None:
    docs: dict[str, Mapping[str, Any]] = {}
    for doc in task.docs:
        docs.setdefault(doc["name"], doc)  # bfcl_eval takes the first doc of a name
    expected = task.answers
    if "parallel" in task.category:
        if len(calls) != len(expected):
            return _wrong_count("parallel_function_checker_no_order", len(calls), len(expected))
        taken: set[int] = set()
        for k, answer in enumerate(expected):
            doc = docs[answer.name]
            for i, call in enumerate(calls):
                if i not in taken and _check_call(doc, call, answer, underscore_to_dot) is None:
                    taken.add(i)
                    break
            else:
                return _Problem("parallel_function_checker_no_order:cannot_find_match",
                                f"no call left matches expected call {k} ({answer.name})")
        return None
    if "multiple" in task.category:
        if len(calls) != len(expected):
            return _wrong_count("multiple_function_checker", len(calls), len(expected))
        return _check_call(docs[expected[0].name], calls[0], expected[0], underscore_to_dot)
    if len(calls) != 1:
        return _wrong_count("simple_function_checker", len(calls), 1)
    return _check_call(task.docs[0], calls[0], expected[0], underscore_to_dot)


def _wrong_count(checker: str, made: int, wanted: int) -> _Problem:
    return _Problem(f"{checker}:wrong_count", f"{made} call(s) made, {wanted} expected")


def _check_call(doc: Mapping[str, Any], call: ToolCall, answer: ExpectedCall,
                underscore_to_dot: bool) -> _Problem | None:
    name = doc["name"].replace(".", "_") if underscore_to_dot else doc["name"]
    if call.name != name:
        return _Problem("simple_function_checker:wrong_func_name",
                        f"called {call.name!r}, expected {name!r}")
    properties = doc["parameters"]["properties"]
    for param in doc["parameters"]["required"]:
        if param not in call.args:
            return _Problem("simple_function_checker:missing_required",
                            f"{name}: missing required parameter {param!r}")
    for param, value in call.args.items():
        if param not in properties or param not in answer.choices:
            return _Problem("simple_function_checker:unexpected_param",
                            f"{name}: unexpected parameter {param!r}")
        problem = _check_value(param, value, properties[param], answer.choices[param])
        if problem is not None:
            return problem
    for param, choices in answer.choices.items():
        if param not in call.args and "" not in choices:
            return _Problem("simple_function_checker:missing_optional",
                            f"{name}: parameter {param!r} left out, but the answer needs it")
    return None


def _check_value(param: str, value: Any, spec: Mapping[str, Any],
                 choices: Sequence[Any]) -> _Problem | None:
    declared = spec["type"]
    wanted = _TYPES[declared]
    items = spec.get("items") if declared in ("array", "tuple") else None
    item_type = _TYPES[items["type"]] if items else None
    if declared == "tuple" and type(value) is tuple:
        value = list(value)
    if declared == "float" and type(value) is int:
        value = float(value)
    written_type = _choice_type(choices)
    if type(value) is wanted:
        if item_type is not None and not any(
                type(c) is not list or all(_item_typed(v, item_type, c) for v in value)
                for c in choices):
            kind = "nested" if type(value) is written_type else "simple"
            return _Problem(f"type_error:{kind}",
                            f"{param}: items of {_preview(value)} are not all {items['type']}")
        as_written = written_type is not None and written_type is not wanted
    elif written_type is not None and type(value) is written_type:
        as_written = True
    else:
        return _Problem("type_error:simple",
                        f"{param}: expected {declared}, got {type(value).__name__} "
                        f"{_preview(value)}")
    if not as_written:
        if wanted is dict:
            return _dict_problem(param, value, choices)
        if wanted is list and item_type is dict:
            return _list_of_dicts_problem(param, value, choices)
        if wanted is str:
            if _standard(value) in [_standard(c) for c in choices if type(c) is str]:
                return None
            return _Problem("value_error:string", f"{param}: {_preview(value)} is not accepted")
        if wanted is list:
            options = [_standard_items(c) for c in choices if isinstance(c, (list, str))]
            if _standard_items(value) in options:
                return None
            return _Problem("value_error:list/tuple",
                            f"{param}: {_preview(value)} is not accepted")
    if value in choices:
        return None
    return _Problem("value_error:others", f"{param}: {_preview(value)} is not accepted")


def _choice_type(choices: Sequence[Any]) -> type | None:
    """The type of the first accepted value that is not "" (the optional marker)."""
    return next((type(c) for c in choices if c != ""), None)


def _item_typed(item: Any, item_type: type, choice: Sequence[Any]) -> bool:
    return type(item) is item_type or type(item) is _choice_type(choice)


def _dict_problem(param: str, value: Any, choices: Sequence[Any]) -> _Problem | None:
    problem = _Problem("dict_checker:unclear", f"{param}: no accepted dict")
    if not isinstance(value, dict):
        return _Problem("value_error:dict_value", f"{param}: {_preview(value)} is not a dict")
    for choice in choices:
        if not isinstance(choice, dict):
            continue  # "": the parameter may be left out
        key_problem = None
        for key, item in value.items():
            if key not in choice:
                key_problem = _Problem("value_error:dict_key", f"{param}: unexpected key {key!r}")
                break
            if _standard_value(item) not in [_standard_value(c) for c in choice[key]]:
                key_problem = _Problem("value_error:dict_value",
                                       f"{param}[{key!r}]: {_preview(item)} is not accepted")
                break
        missing = [key for key, accepted in choice.items() if key not in value and "" not in accepted]
        if missing:  # bfcl_eval reports a missing key over any other problem with this dict
            problem = _Problem("value_error:dict_key", f"{param}: missing key {missing[0]!r}")
        elif key_problem is not None:
            problem = key_problem
        else:
            return None
    return problem


def _list_of_dicts_problem(param: str, value: list[Any], choices: Sequence[Any]
                           ) -> _Problem | None:
    problem = _Problem("list_dict_checker:unclear", f"{param}: no accepted list")
    for choice in choices:
        if not isinstance(choice, (list, str)) or len(value) != len(choice):
            problem = _Problem("value_error:list_dict_count",
                               f"{param}: {len(value)} dicts, not as accepted")
            continue
        for item, accepted in zip(value, choice):
            problem = _dict_problem(param, item, [accepted])
            if problem is not None:
                break
        else:
            return None
    return problem


def _standard(text: str) -> str:
    return _STANDARDISED_AWAY.sub("", text).lower().replace("'", '"')


def _standard_value(value: Any) -> Any:
    return _standard(value) if type(value) is str else value


def _standard_items(value: list[Any] | str) -> list[Any]:
    """A list with its string items standardised (a string accepted value: its characters, as
    bfcl_eval indexes it)."""
    return [_standard_value(v) for v in value]


def _preview(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
