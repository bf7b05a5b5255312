"""The tool-retrieval benchmark built from what `bfcl-eval` ships: BFCL's single-turn categories.

Corpus: every function doc of every single-turn entry (~3.3k docs, ~1.9k names). Queries: each
entry's user messages; gold: the docs of the functions its ground truth calls (irrelevance entries
have none: no tool fits). Nothing of BFCL is copied here; the files are read from the package.

The split is deterministic, by hashes (no RNG, no order dependence):
- a tool (a function *name*, so that near-duplicate docs of one API go together) is held out when
  its hash falls under `unseen_fraction`; a query calling a held-out tool is a test query;
- the other queries go to test when their text's hash falls under `test_fraction`; identical texts
  land together (all in test when one must be);
- a test query whose gold tools all are gold of some training query is in `seen_test`; one with a
  tool no training query calls is in `unseen_test` (those tools are never trained on: the training
  set also never uses their docs as negatives, see `Split.held_out_docs`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seetjax.errors import require
from seetjax.retrieval.corpus import ToolDoc, tool_doc

WITH_GOLD = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel",
             "parallel_multiple", "live_simple", "live_multiple", "live_parallel",
             "live_parallel_multiple")
NO_GOLD = ("irrelevance", "live_irrelevance")
# live_relevance has no ground truth (any call counts): its docs join the corpus, not its queries.
DOCS_ONLY = ("live_relevance",)
SPLIT_SALT = "seetjax-tool-retrieval-v1"


@dataclasses.dataclass(frozen=True)
class Query:
    id: str
    text: str
    gold: tuple[str, ...]  # doc ids; empty when no tool fits
    category: str


@dataclasses.dataclass(frozen=True)
class ToolRetrievalData:
    docs: tuple[ToolDoc, ...]
    queries: tuple[Query, ...]
    functions: Mapping[str, dict[str, Any]]  # doc id -> its JSON function doc (for prompts)


def bfcl_data_dir() -> Path:
    # Located here rather than through envs/: retrieval is a library below the environments.
    import bfcl_eval
    return Path(bfcl_eval.__file__).parent / "data"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _query_text(entry: dict[str, Any]) -> str:
    """The user messages of the entry's (single) turn: what the user asks for."""
    return "\n".join(m["content"] for m in entry["question"][0] if m["role"] == "user").strip()


@functools.cache
def load_bfcl_tools() -> ToolRetrievalData:
    """Corpus and queries of all single-turn categories (docs deduplicated by `doc_id`)."""
    root = bfcl_data_dir()
    docs: dict[str, ToolDoc] = {}
    functions: dict[str, dict[str, Any]] = {}
    queries = []
    for category in (*WITH_GOLD, *NO_GOLD, *DOCS_ONLY):
        answers = {}
        if category in WITH_GOLD:
            answers = {a["id"]: a["ground_truth"]
                       for a in _read_jsonl(root / "possible_answer" / f"BFCL_v4_{category}.json")}
        for entry in _read_jsonl(root / f"BFCL_v4_{category}.json"):
            by_name = {}
            for function in entry["function"]:
                doc = tool_doc(function)
                docs.setdefault(doc.id, doc)
                functions.setdefault(doc.id, function)
                by_name[doc.name] = doc.id
            if category in DOCS_ONLY:
                continue
            # Ground truth: a list of {function_name: {arg: [allowed values]}}.
            gold = sorted({by_name[next(iter(call))] for call in answers.get(entry["id"], [])})
            queries.append(Query(entry["id"], _query_text(entry), tuple(gold), category))
    return ToolRetrievalData(tuple(docs.values()), tuple(queries), functions)


def _unit_hash(*parts: str) -> float:
    """A deterministic number in [0, 1) from `parts` (sha256, not Python's salted hash)."""
    digest = hashlib.sha256("\x1f".join((SPLIT_SALT, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclasses.dataclass(frozen=True)
class Split:
    train: tuple[Query, ...]  # with gold only
    seen_test: tuple[Query, ...]
    unseen_test: tuple[Query, ...]
    no_tool_test: tuple[Query, ...]  # test queries with no gold (irrelevance)
    held_out_docs: frozenset[str]  # docs of the unseen tools: never a positive or a negative


def split_queries(data: ToolRetrievalData, test_fraction: float = 0.2,
                  unseen_fraction: float = 0.15) -> Split:
    """The deterministic split described in the module docstring."""
    require(0 < test_fraction < 1, "split", "test_fraction", test_fraction, "must be in (0, 1)")
    require(0 <= unseen_fraction < 1, "split", "unseen_fraction", unseen_fraction,
            "must be in [0, 1)")
    name_of = {d.id: d.name for d in data.docs}
    # A text asked in several entries (BFCL repeats some across categories) is tested wherever
    # one of its entries must be: its copies never train.
    test_texts = {q.text for q in data.queries
                  if _unit_hash("query", q.text) < test_fraction
                  or any(_unit_hash("tool", name_of[g]) < unseen_fraction for g in q.gold)}
    in_test = lambda q: q.text in test_texts
    train = tuple(q for q in data.queries if q.gold and not in_test(q))
    trained_names = {name_of[g] for q in train for g in q.gold}
    seen, unseen, no_tool = [], [], []
    for q in data.queries:
        if not q.gold:
            if in_test(q):
                no_tool.append(q)
        elif in_test(q):
            (seen if all(name_of[g] in trained_names for g in q.gold) else unseen).append(q)
    unseen_names = {name_of[g] for q in unseen for g in q.gold} - trained_names
    return Split(train, tuple(seen), tuple(unseen), tuple(no_tool),
                 frozenset(d.id for d in data.docs if d.name in unseen_names))
