"""Where BFCL's multi-turn data lives in the installed `bfcl-eval` package, and how to read it.

Nothing of BFCL is copied into this repository: questions, ground truth and function docs are read
from `bfcl_eval/data/` of the pinned package.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
# The eight API classes of the multi-turn categories (the mapping also lists agentic ones).
MULTI_TURN_CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI",
                      "TradingBot", "TravelAPI", "VehicleControlAPI")


def data_dir() -> Path:
    import bfcl_eval
    return Path(bfcl_eval.__file__).parent / "data"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def load_category(category: str) -> tuple[dict[str, Any], ...]:
    """Entries of multi-turn `category`, each with its `ground_truth` (call strings per turn)."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}; one of {CATEGORIES}")
    name = f"BFCL_v4_multi_turn_{category}.json"
    answer_file = data_dir() / "possible_answer" / name
    answers = {a["id"]: a["ground_truth"] for a in read_jsonl(answer_file)}
    return tuple({**entry, "ground_truth": answers[entry["id"]]}
                 for entry in read_jsonl(data_dir() / name))


@functools.cache
def load_func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """JSON function docs of one API class (`GorillaFileSystem`, `MathAPI`, ...)."""
    if class_name not in MULTI_TURN_CLASSES:
        raise ValueError(f"unknown BFCL API class {class_name!r}; one of {MULTI_TURN_CLASSES}")
    path = data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(read_jsonl(path))
