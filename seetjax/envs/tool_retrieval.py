"""Retrieved toolsets in BFCL episodes: each user turn is offered only the top-k tools a retriever
finds for it, among the task's own tools and a library of distractors.

Pool. A task's pool is its tools (the docs shown at the start, and miss_func's held-out docs from
the turn that reveals them) plus `distractors` function docs of BFCL's single-turn categories
(`seetjax.retrieval.bfcl_tools`), none named like a task tool, drawn and ordered by an RNG seeded
with the task id (the same pool in every process, sample and run). The pool is shuffled so that a
tie in scores (a query sharing no word with two docs) favours neither the task's tools nor the
distractors.

Query. The text of the turn's user messages; a turn with none (a miss_func turn that only reveals
tools) reads the latest earlier turn's, the request still pending.

Retrievers. "bm25": Okapi BM25 (`bm25s`) over the pool's texts; "dense": a sentence encoder
(all-MiniLM-L6-v2 by default) loaded once per process when first used, doc embeddings cached by
text. A turn's ranking is computed once per (task, turn, retriever) in the process, however many
samples of a group, decodings or values of k read it.

How an episode uses it is `seetjax.envs.bfcl.env.BfclEnv`'s business: the first turn's tools are the
system prompt's, a later turn's new ones are listed in a user message (`tools_message`) as
miss_func reveals tools, and only the turn's offered task tools are callable.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seetjax.envs.bfcl.data import BfclTask
from seetjax.errors import invalid, require_int
from seetjax.retrieval.corpus import doc_text
from seetjax.tools import prompts
from seetjax.tools.schema import ToolSchema

if TYPE_CHECKING:  # imported when used: bm25s and the encoder's stack are not every env's needs
    from seetjax.retrieval.retriever import BM25Retriever
    from seetjax.retrieval.sentence import SentenceEncoder

MODES = ("off", "bm25", "dense")
SALT = "seetjax-env-tool-retrieval-v1"


@dataclasses.dataclass(frozen=True)
class RetrievalSettings:
    """`BfclEnvConfig`'s tool_retrieval fields (mode, k, distractors, encoder), checked; errors
    name those fields."""

    mode: str = "off"
    k: int = 10
    distractors: int = 100
    encoder: str = ""  # an HF sentence-encoder directory; "": all-MiniLM-L6-v2's package

    def __post_init__(self):
        if self.mode not in MODES:
            raise invalid("BfclEnvConfig", "tool_retrieval", self.mode, f"one of {MODES}")
        for name, value, least in (("tool_retrieval_k", self.k, 1),
                                   ("tool_retrieval_distractors", self.distractors, 0)):
            require_int("BfclEnvConfig", name, value, least)
        if self.mode == "dense":
            encoder_dir(self.encoder)

    @property
    def on(self) -> bool:
        return self.mode != "off"


@functools.cache
def encoder_dir(encoder: str) -> Path:
    """The sentence-encoder directory `tool_retrieval_encoder` names ("" = all-MiniLM-L6-v2),
    checked to hold what `SentenceEncoder.from_dir` reads."""
    from seetjax.retrieval.hf_encoder import minilm_dir

    try:
        path = Path(encoder) if encoder else minilm_dir()
    except FileNotFoundError as e:
        raise invalid("BfclEnvConfig", "tool_retrieval_encoder", encoder,
                      f"tool_retrieval='dense' needs an encoder: {e}") from None
    missing = [f for f in ("config.json", "tokenizer.json") if not (path / f).is_file()]
    if missing:
        raise invalid("BfclEnvConfig", "tool_retrieval_encoder", encoder,
                      f"{path} has no {', '.join(missing)} "
                         "(an HF sentence-encoder directory is needed)")
    return path


# ---------------------------------------------------------------- pools and queries

@dataclasses.dataclass(frozen=True)
class Pool:
    """A task's candidate tools: `docs[i]` may be offered from turn `since[i]` on."""

    docs: tuple[dict[str, Any], ...]
    since: tuple[int, ...]
    texts: tuple[str, ...]  # what the retrievers read (`seetjax.retrieval.corpus.doc_text`)


def available_docs(task: BfclTask, turn: int) -> tuple[dict[str, Any], ...]:
    """The task's docs shown by `turn` without retrieval: those of the start, then each held-out
    doc from its reveal turn on."""
    revealed = [d for t in sorted(task.held_out) if t <= turn for d in task.held_out[t]]
    return (*task.docs, *revealed)


def _rng(task: BfclTask) -> random.Random:
    digest = hashlib.sha256(f"{SALT}:{task.id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@functools.lru_cache(maxsize=1024)
def task_pool(task: BfclTask, distractors: int) -> Pool:
    """The task's pool with `distractors` library docs (see the module docstring)."""
    from seetjax.retrieval.bfcl_tools import load_bfcl_tools

    own = {d["name"]: (d, 0) for d in task.docs}
    for turn in sorted(task.held_out):
        for d in task.held_out[turn]:
            own.setdefault(d["name"], (d, turn))
    library: dict[str, dict[str, Any]] = {}
    for function in load_bfcl_tools().functions.values():
        # One doc per name: BFCL repeats names across entries with other descriptions.
        if function["name"] not in own:
            library.setdefault(function["name"], function)
    rng = _rng(task)
    drawn = rng.sample(sorted(library), min(distractors, len(library)))
    entries = [*own.values(), *((library[name], 0) for name in drawn)]
    rng.shuffle(entries)
    return Pool(tuple(d for d, _ in entries), tuple(t for _, t in entries),
                tuple(doc_text(d) for d, _ in entries))


def turn_query(task: BfclTask, turn: int) -> str:
    """The text `turn` retrieves with (see the module docstring)."""
    for t in range(turn, -1, -1):
        text = "\n".join(str(m["content"]) for m in task.turns[t] if m.get("role") == "user")
        if text.strip():
            return text.strip()
    raise ValueError(f"{task.id}: no user text in turns 0..{turn} to retrieve tools with")


# ---------------------------------------------------------------- retrieval

# Episodes run in the rollout's threads; one lock keeps every cache filled once and the encoder
# loaded once (a ranking takes milliseconds, so serialising them costs nothing that matters).
_LOCK = threading.RLock()
_VECTORS: dict[tuple[Path, str], np.ndarray] = {}  # (encoder dir, text) -> unit-norm embedding


@functools.lru_cache(maxsize=256)
def _bm25(task: BfclTask, distractors: int) -> BM25Retriever:
    from seetjax.retrieval.corpus import ToolDoc
    from seetjax.retrieval.retriever import BM25Retriever

    pool = task_pool(task, distractors)
    return BM25Retriever([ToolDoc(str(i), d["name"], text)
                          for i, (d, text) in enumerate(zip(pool.docs, pool.texts))])


@functools.cache
def sentence_encoder(path: Path) -> SentenceEncoder:
    """The dense retriever's encoder: loaded once per process, on first use."""
    from seetjax.retrieval.sentence import SentenceEncoder

    return SentenceEncoder.from_dir(path)


def _embeddings(path: Path, texts: Sequence[str]) -> np.ndarray:
    """[N, D] embeddings of `texts`, encoding only those not seen before."""
    new = [t for t in dict.fromkeys(texts) if (path, t) not in _VECTORS]
    if new:
        for text, vector in zip(new, sentence_encoder(path).encode(new)):
            _VECTORS[path, text] = vector
    return np.stack([_VECTORS[path, t] for t in texts])


def _scores(task: BfclTask, mode: str, distractors: int, encoder: str, query: str) -> np.ndarray:
    """The pool's scores [N] for `query`."""
    if mode == "bm25":
        return _bm25(task, distractors).scores([query])[0]
    path = encoder_dir(encoder)
    docs = _embeddings(path, task_pool(task, distractors).texts)
    # Encoded as a document is: a query past the encoder's length is cut, as
    # sentence-transformers does (BFCL's user turns are far shorter).
    return docs @ sentence_encoder(path).encode([query])[0]


@functools.lru_cache(maxsize=8192)
def _ranking(task: BfclTask, turn: int, mode: str, distractors: int, encoder: str
             ) -> tuple[int, ...]:
    """Pool rows offerable at `turn`, best first (ties to the lower row)."""
    scores = np.asarray(_scores(task, mode, distractors, encoder, turn_query(task, turn)),
                        np.float64)
    since = np.asarray(task_pool(task, distractors).since)
    order = np.argsort(-scores, kind="stable")
    return tuple(int(i) for i in order if since[i] <= turn)


def offered_docs(task: BfclTask, turn: int, settings: RetrievalSettings
                 ) -> tuple[dict[str, Any], ...]:
    """The docs `turn` offers, best first: the top `k` of the pool (off: `available_docs`)."""
    if not settings.on:
        return available_docs(task, turn)
    with _LOCK:
        ranking = _ranking(task, turn, settings.mode, settings.distractors, settings.encoder)
    docs = task_pool(task, settings.distractors).docs
    return tuple(docs[i] for i in ranking[:settings.k])


@functools.lru_cache(maxsize=256)
def call_schemas(task: BfclTask, distractors: int) -> Mapping[str, ToolSchema]:
    """What replies are read against: the task's tools and its distractors (so that a call to a
    listed distractor, `math.factorial(n=5)`, is read as a call and answered like any unknown
    function, not refused as unreadable)."""
    pool = task_pool(task, distractors)
    own = task.schemas
    library = {d["name"]: ToolSchema.from_doc(d) for d in pool.docs if d["name"] not in own}
    return types.MappingProxyType({**own, **library})


def tools_message(new_docs: Sequence[Mapping[str, Any]], names: Sequence[str], style: str,
                  description_chars: int) -> str:
    """The user message that gives a turn its tools: the docs of those not shown earlier in the
    episode, rendered as the system prompt renders docs (compact: `description_chars` of each
    description), then the names of every tool the turn offers."""
    offer = f"For this request, the functions you can call are: {', '.join(names)}."
    if not new_docs:
        return offer
    return f"{prompts.functions_listing(new_docs, style, description_chars)}\n{offer}"
