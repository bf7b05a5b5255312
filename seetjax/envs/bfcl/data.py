"""Where BFCL's multi-turn data lives in the installed `bfcl-eval` package, and how to read it.

Nothing of BFCL is copied into this repository: questions, ground truth, function docs and the API
classes are read from the pinned package. `load_tasks` turns the raw entries into `BfclTask`s with
ground truth parsed into `ToolCall`s, the docs the model sees (prepared by bfcl_eval's own
functions, so they match BFCL's prompts exactly) and the held-out docs of miss_func entries.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    STATELESS_CLASSES,
)

from seetjax.errors import invalid
from seetjax.tools.calls import ParseError, ToolCall, parse_python_calls
from seetjax.tools.executor import ToolExecutor
from seetjax.tools.schema import ToolSchema

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
# The eight API classes of the multi-turn categories (the mapping also lists agentic ones).
MULTI_TURN_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI",
                      "TradingBot", "TravelAPI", "VehicleControlAPI")

# Validation-only patches of the docs (tool -> parameter -> spec keys); prompts show the docs as
# they are. Bounds: arguments that set how much work a tool does, without which one call can run
# for hours (`power(base=10, exponent=10**12)`, `square_root(precision=10**9)`) or make a number
# too long to print; ground truth stays far inside them (exponents < 10, precision <= 10).
# Types: TicketAPI documents ticket ids as integers, but entry 173 of every category has a ticket
# with id 'ticket_001' and its ground truth closes it by that string.
_TICKET_ID = {"ticket_id": {"type": ["integer", "string"]}}
SCHEMA_OVERLAYS: dict[str, dict[str, dict[str, Any]]] = {
    "power": {"base": {"minimum": -1e15, "maximum": 1e15},
              "exponent": {"minimum": -256, "maximum": 256}},
    "square_root": {"precision": {"minimum": 0, "maximum": 1000}},
    "logarithm": {"precision": {"minimum": 0, "maximum": 1000}},
    "round_number": {"decimal_places": {"minimum": -100, "maximum": 100}},
    "close_ticket": _TICKET_ID, "edit_ticket": _TICKET_ID, "get_ticket": _TICKET_ID,
    "resolve_ticket": _TICKET_ID,
}


def data_dir() -> Path:
    import bfcl_eval
    return Path(bfcl_eval.__file__).parent / "data"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def load_category(category: str) -> tuple[dict[str, Any], ...]:
    """Raw entries of multi-turn `category`, each with its `ground_truth` (call strings per turn)."""
    if category not in CATEGORIES:
        raise invalid("load_category", "category", category, f"one of {CATEGORIES}")
    name = f"BFCL_v4_multi_turn_{category}.json"
    answer_file = data_dir() / "possible_answer" / name
    answers = {a["id"]: a["ground_truth"] for a in read_jsonl(answer_file)}
    return tuple({**entry, "ground_truth": answers[entry["id"]]}
                 for entry in read_jsonl(data_dir() / name))


@functools.cache
def load_func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """JSON function docs of one API class (`GorillaFileSystem`, `MathAPI`, ...)."""
    _check_class(class_name)
    path = data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(read_jsonl(path))


def api_class(class_name: str) -> type:
    """The executable API class, imported from bfcl_eval's func_source_code package."""
    _check_class(class_name)
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


@functools.cache
def class_schemas(class_name: str) -> tuple[ToolSchema, ...]:
    """Schemas of one class's tools. Positional arguments bind in the Python signature's order
    (it differs from the doc's property order for `purchase_insurance`), with `SCHEMA_OVERLAYS`."""
    cls = api_class(class_name)
    schemas = []
    for doc in load_func_docs(class_name):
        signature = inspect.signature(getattr(cls, doc["name"]))
        order = [p for p in signature.parameters if p != "self"]
        schemas.append(ToolSchema.from_doc(doc, order, SCHEMA_OVERLAYS.get(doc["name"])))
    return tuple(schemas)


def new_instances(involved_classes: Iterable[str], initial_config: Mapping[str, Any],
                  long_context: bool) -> dict[str, object]:
    """Fresh instances of the involved API classes loaded with the entry's scenario, as bfcl_eval
    sets them up (stateless classes are not loaded)."""
    instances = {}
    for class_name in involved_classes:
        instance = api_class(class_name)()
        if class_name not in STATELESS_CLASSES:
            instance._load_scenario(copy.deepcopy(dict(initial_config).get(class_name, {})),
                                    long_context=long_context)
        instances[class_name] = instance
    return instances


@dataclass(frozen=True, eq=False)
class BfclTask:
    """One BFCL multi-turn entry, ready for an episode.

    `turns[t]` holds the user messages of turn t (empty on a miss_func turn that only reveals
    tools); `ground_truth[t]` the calls expected in turn t (empty: the model should make none);
    `docs` the tool docs shown at the start (with BFCL's language hint), `held_out[t]` the docs
    revealed at turn t.
    """

    id: str
    category: str
    index: int
    turns: tuple[tuple[dict[str, Any], ...], ...]
    ground_truth: tuple[tuple[ToolCall, ...], ...]
    ground_truth_text: tuple[tuple[str, ...], ...]
    involved_classes: tuple[str, ...]
    initial_config: Mapping[str, Any]
    docs: tuple[dict[str, Any], ...]
    held_out: Mapping[int, tuple[dict[str, Any], ...]]
    long_context: bool

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def schemas(self) -> dict[str, ToolSchema]:
        """Every tool of the involved classes, held-out ones included, by name."""
        return {s.name: s for c in self.involved_classes for s in class_schemas(c)}

    def held_out_names(self) -> set[str]:
        return {doc["name"] for docs in self.held_out.values() for doc in docs}

    def new_executor(self, available: Iterable[str] | None = None,
                     check_types: bool = True) -> ToolExecutor:
        """An executor on fresh instances of this task's scenario."""
        instances = new_instances(self.involved_classes, self.initial_config, self.long_context)
        schemas = {c: class_schemas(c) for c in self.involved_classes}
        return ToolExecutor(instances, schemas, available, check_types)


@functools.cache
def load_tasks(category: str) -> tuple[BfclTask, ...]:
    """All entries of a category as `BfclTask`s, in BFCL's order (index = the id's number)."""
    from bfcl_eval.utils import (
        add_language_specific_hint_to_function_doc,
        populate_test_cases_with_predefined_functions,
    )

    entries = copy.deepcopy(list(load_category(category)))
    # bfcl_eval's own preparation: docs of the involved classes, held-out docs moved aside, then
    # the language hint added to the docs shown at the start (not to the held-out ones).
    entries = add_language_specific_hint_to_function_doc(
        populate_test_cases_with_predefined_functions(entries))
    return tuple(task_from_entry(category, entry) for entry in entries)


def task_from_entry(category: str, entry: dict[str, Any]) -> BfclTask:
    """A `BfclTask` from a raw entry prepared by bfcl_eval (docs populated, held-out docs moved
    aside): BFCL's own entries and generated ones alike."""
    involved = tuple(entry["involved_classes"])
    schemas = {s.name: s for c in involved for s in class_schemas(c)}
    held_out = {int(turn): tuple(docs) for turn, docs in entry.get("missed_function", {}).items()}
    return BfclTask(
        id=entry["id"], category=category, index=int(entry["id"].rsplit("_", 1)[1]),
        turns=tuple(tuple(messages) for messages in entry["question"]),
        ground_truth=tuple(tuple(_ground_truth_call(text, schemas) for text in turn)
                           for turn in entry["ground_truth"]),
        ground_truth_text=tuple(tuple(turn) for turn in entry["ground_truth"]),
        involved_classes=involved, initial_config=entry.get("initial_config", {}),
        docs=tuple(entry["function"]), held_out=held_out, long_context=category == "long_context")


def _ground_truth_call(text: str, schemas: Mapping[str, ToolSchema]) -> ToolCall:
    parsed = parse_python_calls(text, schemas)
    if isinstance(parsed, ParseError) or len(parsed) != 1 or parsed[0].positional:
        raise ValueError(f"BFCL ground truth {text!r} is not one literal call: {parsed}")
    return parsed[0]


def _check_class(class_name: str) -> None:
    if class_name not in MULTI_TURN_CLASSES:
        raise invalid("BFCL", "class_name", class_name, f"one of {MULTI_TURN_CLASSES}")
