"""BFCL single-turn entries -> SFT dialogs of the `tool_selection` and `tool_retrieval` types.

One dialog per entry: the entry's prompt in the run's prompt style (`bfcl_single.opening`), then
one assistant reply, the ground truth written in the style's call format (structured `tool_calls`
for hermes, BFCL's python list as text otherwise; one accepted value per parameter, the first
BFCL lists, "" leaving it out).

Every reply is read back with the style's parser (`bfcl_single.parse_reply`) and judged by the
project's single-turn checker before its dialog is kept; one that fails is reported, not written
(BFCL has a few such entries: a required parameter whose accepted values allow leaving it out).

- tool_selection: the entry as BFCL asks it (its own docs). AST categories reply with the expected
  call(s); irrelevance and live_irrelevance, whose right answer is no call, reply with
  `NO_FITTING_TOOL`. live_relevance has no ground-truth call and is not used.
- tool_retrieval: the docs offered are the top `k` that BM25 (`BM25Retriever`) retrieves for the
  user's question from a library: the docs of every training entry, where a doc that shares a
  (shown) name with one of the entry's own docs but differs from it is left out, and of other docs
  sharing a name only the best scored is offered, so that no prompt offers two functions of one
  name. They are shown in a seeded random order, so that the rank
  BM25 gave is not a cue. The reply calls the gold function(s). An entry whose gold docs are not
  all among the k is skipped, not answered with no call: the library holds near-duplicates
  (BFCL reuses an API under several docs), so "no retrieved tool fits" would often be false and
  teach refusing a doable request; irrelevance entries teach refusing already.
  A retrieval dialog is judged as BFCL's `multiple` category (one of several docs) where the
  entry was `simple` (the doc to call is no longer the first), as its own category otherwise.

Split: an entry trains only when its question is in none of the test sets of the tool-retrieval
benchmark (`retrieval.bfcl_tools.split_queries` with `launch/retrieval.py`'s default fractions:
seen-tool, unseen-tool and no-tool test queries never train, and the docs of unseen tools are
never offered). Single-turn entries had no split of their own; this is theirs (`held_out_ids`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from seetjax.data.bfcl_dialogs import Closings, assistant_message
from seetjax.data.dialogs import Dialog, listing
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.single_turn import (
    IRRELEVANCE,
    LIVE_AST,
    NON_LIVE_AST,
    ExpectedCall,
    SingleTurnTask,
    load_tasks,
    opening,
    parse_reply,
    underscored_names,
)
from seetjax.envs.bfcl.single_turn_checker import SingleTurnResult, check
from seetjax.errors import invalid
from seetjax.retrieval.bfcl_tools import load_bfcl_tools, split_queries
from seetjax.retrieval.corpus import ToolDoc, tool_doc
from seetjax.retrieval.retriever import BM25Retriever
from seetjax.tools.calls import ToolCall

# The reply where no offered function fits: one wording for single-turn and multi-turn dialogs.
NO_FITTING_TOOL = Closings().missing_function
SELECTION_CATEGORIES = (*NON_LIVE_AST, *LIVE_AST, *IRRELEVANCE)
RETRIEVAL_CATEGORIES = (*NON_LIVE_AST, *LIVE_AST)
# How retrieval dialogs are judged where the entry's own category no longer fits (see above).
_RETRIEVAL_CATEGORY = {"simple": "multiple", "live_simple": "live_multiple"}


def first_choice(choices: Sequence[Any]) -> Any:
    """The first accepted value, as BFCL lists them."""
    return choices[0]


def accepted_values(choices: Mapping[str, Sequence[Any]],
                    choose: Callable[[Sequence[Any]], Any] = first_choice,
                    resolve: bool = True) -> dict[str, Any]:
    """One accepted value per parameter, picked by `choose` ("" leaves the parameter out). BFCL
    lists the accepted values of each key of a dict argument too, one level deep: with `resolve`
    such dicts (alone or in a list) are resolved the same way."""
    out = {}
    for key, accepted in choices.items():
        if not accepted:
            continue
        value = choose(accepted)
        if value == "":
            continue
        if resolve and isinstance(value, dict):
            value = accepted_values(value, choose, resolve=False)
        elif resolve and isinstance(value, list):
            value = [accepted_values(v, choose, resolve=False) if isinstance(v, dict) else v
                     for v in value]
        out[key] = value
    return out


def answer_call(answer: ExpectedCall, underscored: bool = False,
                choose: Callable[[Sequence[Any]], Any] = first_choice) -> ToolCall:
    """A call passing `answer`, its name with "_" for "." where the style shows names so."""
    name = answer.name.replace(".", "_") if underscored else answer.name
    return ToolCall(name, accepted_values(answer.choices, choose))


@functools.cache
def held_out_ids() -> frozenset[str]:
    """Ids of the entries held out of training (see the module docstring)."""
    split = split_queries(load_bfcl_tools())
    return frozenset(q.id for q in (*split.seen_test, *split.unseen_test, *split.no_tool_test))


@functools.cache
def held_out_tool_names() -> frozenset[str]:
    """Names of the unseen tools of the retrieval benchmark (never offered in training)."""
    data = load_bfcl_tools()
    held_out = split_queries(data).held_out_docs
    return frozenset(d.name for d in data.docs if d.id in held_out)


def training_tasks(categories: Iterable[str]) -> list[SingleTurnTask]:
    """The training entries of `categories`, category by category in BFCL's order."""
    held_out = held_out_ids()
    return [t for c in categories for t in load_tasks(c) if t.id not in held_out]


def reply(task: SingleTurnTask, config: BfclEnvConfig) -> tuple[dict[str, Any], str]:
    """The ground-truth assistant message of `task` and the text a parser reads for it."""
    if not task.answers:
        return {"role": "assistant", "content": NO_FITTING_TOOL}, NO_FITTING_TOOL
    calls = [answer_call(a, underscored_names(config)) for a in task.answers]
    return assistant_message(calls, config.resolved_call_format == "hermes")


class ReplyFailure(ValueError):
    """A ground-truth reply that the checker does not pass (see `task_dialog`)."""


def check_reply(task: SingleTurnTask, text: str, config: BfclEnvConfig) -> SingleTurnResult:
    """The checker's verdict on `text` as a reply to `task`, read with `config`'s parser."""
    return check(task, parse_reply(task, text, config), underscored_names(config))


def task_dialog(task: SingleTurnTask, config: BfclEnvConfig, task_type: str,
                **metadata: Any) -> Dialog:
    """`task`'s prompt in `config`'s style and its ground-truth reply, as a dialog of
    `task_type` (set in the metadata: the structure alone would call a parallel reply
    multi-step planning and a no-call reply a timing decision). Raises ReplyFailure when the
    reply does not pass the checker."""
    messages, tools = opening(task, config)
    message, text = reply(task, config)
    verdict = check_reply(task, text, config)
    if not verdict.valid:
        raise ReplyFailure(f"the ground-truth reply {text!r} fails the checker: "
                           f"{verdict.error_type}: {verdict.message}")
    return Dialog(id=f"single_turn/{task_type}/{config.prompt_style}/{task.id}",
                  messages=[*messages, message], tools=tools or [],
                  metadata={"source": "bfcl_single_turn", "task_id": task.id,
                            "category": task.category, "task_type": task_type,
                            "prompt_style": config.prompt_style,
                            "call_format": config.resolved_call_format,
                            "num_tools_offered": len(task.docs), **metadata})


class CandidateLibrary:
    """The docs of every training entry (unseen tools' left out), searched with BM25."""

    def __init__(self) -> None:
        held_out = held_out_tool_names()
        docs: dict[str, ToolDoc] = {}
        self.functions: dict[str, dict[str, Any]] = {}
        for task in training_tasks(RETRIEVAL_CATEGORIES + IRRELEVANCE):
            for function in task.docs:
                doc = tool_doc(function)
                if doc.name not in held_out and doc.id not in docs:
                    docs[doc.id] = doc
                    self.functions[doc.id] = function
        self.docs = list(docs.values())
        self._shown = np.array([d.name.replace(".", "_") for d in self.docs])
        self._ids = np.array([d.id for d in self.docs])
        self._bm25 = BM25Retriever(self.docs)

    def candidates(self, task: SingleTurnTask, k: int) -> list[dict[str, Any]]:
        """The docs of the k best BM25 scores for `task`'s question, best first (see the module
        docstring on names shared with the entry's docs)."""
        question = "\n".join(m["content"] for m in task.messages if m["role"] == "user")
        scores = self._bm25.scores([question])[0]
        own = {tool_doc(f).id for f in task.docs}
        shown = {f["name"].replace(".", "_") for f in task.docs}
        scores[np.isin(self._shown, list(shown)) & ~np.isin(self._ids, list(own))] = -np.inf
        taken: set[str] = set()
        rows = []
        for r in np.argsort(-scores, kind="stable"):
            if len(rows) == k or not np.isfinite(scores[r]):
                break
            if self._shown[r] not in taken:  # of several docs of one name, the best scored
                taken.add(self._shown[r])
                rows.append(r)
        return [self.functions[self.docs[r].id] for r in rows]


def retrieval_task(task: SingleTurnTask, library: CandidateLibrary, k: int, seed: int
                   ) -> SingleTurnTask | None:
    """`task` offering the k retrieved docs in a seeded order (None when a gold doc is missing)."""
    candidates = library.candidates(task, k)
    gold = {a.name for a in task.answers}
    if not gold <= {f["name"] for f in candidates}:
        return None
    order = np.random.default_rng([seed, _stable_hash(task.id)]).permutation(len(candidates))
    return dataclasses.replace(task, category=_RETRIEVAL_CATEGORY.get(task.category, task.category),
                               docs=tuple(candidates[i] for i in order))


@dataclasses.dataclass(frozen=True)
class SingleTurnReport:
    """Dialogs made per type, the retrieval entries skipped (gold not among the k), and the
    entries left out because their ground truth fails the checker ("<type>/<id>": why)."""

    selection: int
    retrieval: int
    retrieval_missed: int
    eligible: Mapping[str, int]  # training entries each type could draw from
    failed: Mapping[str, str]

    def __str__(self) -> str:
        return (f"single-turn dialogs: {self.selection} tool_selection, {self.retrieval} "
                f"tool_retrieval ({self.retrieval_missed} entries skipped: gold not retrieved); "
                f"training entries {dict(self.eligible)}; {len(self.failed)} left out"
                + listing(dict(self.failed)))


def single_turn_dialogs(config: BfclEnvConfig, selection: int, retrieval: int, *,
                        categories: Sequence[str] = SELECTION_CATEGORIES, k: int = 5,
                        seed: int = 0) -> tuple[list[Dialog], SingleTurnReport]:
    """`selection` tool_selection and `retrieval` tool_retrieval dialogs (-1: all there are;
    fewer when fewer qualify) from the training entries of `categories`, each type drawing its
    entries in its own seeded order. Deterministic in `seed`."""
    check_settings(selection, retrieval, categories, k)
    pool = training_tasks(categories)
    retrieval_pool = [t for t in pool if t.category in RETRIEVAL_CATEGORIES]
    library = CandidateLibrary() if retrieval else None
    dialogs: dict[str, list[Dialog]] = {"tool_selection": [], "tool_retrieval": []}
    failed: dict[str, str] = {}
    missed = 0
    for task_type, tasks, count in (("tool_selection", pool, selection),
                                    ("tool_retrieval", retrieval_pool, retrieval)):
        made = dialogs[task_type]
        for task in _draw(tasks, seed, task_type) if count else ():
            if len(made) == count:
                break
            metadata = {}
            if library is not None and task_type == "tool_retrieval":
                metadata = {"retrieved_k": k, "entry_category": task.category}
                task = retrieval_task(task, library, k, seed)
                if task is None:
                    missed += 1
                    continue
            try:
                made.append(task_dialog(task, config, task_type, **metadata))
            except ReplyFailure as e:
                failed[f"{task_type}/{task.id}"] = str(e)
    eligible = {"tool_selection": len(pool), "tool_retrieval": len(retrieval_pool)}
    report = SingleTurnReport(len(dialogs["tool_selection"]), len(dialogs["tool_retrieval"]),
                              missed, eligible, failed)
    return [*dialogs["tool_selection"], *dialogs["tool_retrieval"]], report


def check_settings(selection: int, retrieval: int, categories: Sequence[str], k: int) -> None:
    """Raises ValueError naming the bad setting (counts, categories, k)."""
    for name, count in (("selection", selection), ("retrieval", retrieval)):
        if isinstance(count, bool) or not isinstance(count, int) or count < -1:
            raise invalid("single_turn", name, count, "a number of dialogs >= 0, or -1 for all")
    bad = [c for c in categories if c not in SELECTION_CATEGORIES]
    if bad or not categories:
        raise invalid("single_turn", "categories", list(categories), "unknown or without a "
                      "ground truth "
                         f"{bad}; choose among {', '.join(SELECTION_CATEGORIES)}")
    if retrieval and not set(categories) & set(RETRIEVAL_CATEGORIES):
        raise invalid("single_turn", "categories", list(categories), "retrieval needs one of "
                         f"{', '.join(RETRIEVAL_CATEGORIES)}")
    if k < 1:
        raise invalid("single_turn", "retrieval_k", k, "retrieval offers at least one tool")


def _draw(tasks: Sequence[SingleTurnTask], seed: int, salt: str) -> list[SingleTurnTask]:
    """`tasks` in the order drawn from (seed, salt): each type takes its entries from the front,
    passing over those it cannot use, so a larger count extends a smaller one's dialogs."""
    order = np.random.default_rng([seed, _stable_hash(salt)]).permutation(len(tasks))
    return [tasks[i] for i in order]


def _stable_hash(text: str) -> int:
    """A 32-bit number from `text` (sha256: Python's `hash` is salted per process)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")
