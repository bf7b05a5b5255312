"""The RAG retriever behind the QA environment's `search` tool, and its retrieval metrics.

Chunking. Passages are cut into windows of `chunk_words` words that overlap by `chunk_overlap`
(a passage no longer than a window is one chunk); a chunk is indexed as "{title}. {text}", so a
window far from the start of its article still names its subject.

Retrievers. "bm25": Okapi BM25 (`bm25s`, through `seetjax.retrieval.retriever.BM25Retriever`);
"dense": the project's Flax sentence encoder (`seetjax.retrieval.sentence.SentenceEncoder`) over an
exact inner-product index (`seetjax.retrieval.retriever.DenseRetriever`); "hybrid": both, fused by
reciprocal rank (Cormack, Clarke & Buettcher 2009): score(d) = sum over rankings r of
1 / (rrf_k + rank_r(d)), ranks from 1, each ranking cut at `fusion_depth`.

Metrics. A search returns chunks; the passage ranking is their passages in order, each kept at its
first (best) rank. Recall@k and MRR@k of those rankings against the gold supporting passages use
`seetjax.retrieval.metrics`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from seetjax.envs.qa_search.corpus import Passage
from seetjax.errors import invalid, require_int
from seetjax.retrieval import metrics
from seetjax.retrieval.corpus import ToolDoc

if TYPE_CHECKING:  # imported when used: bm25s runs JAX at import, the encoder stack is heavy
    from seetjax.retrieval.sentence import SentenceEncoder

RETRIEVERS = ("bm25", "dense", "hybrid")
OWNER = "QASearchConfig"  # the section whose fields RetrieverSettings holds, as it spells them


@dataclasses.dataclass(frozen=True)
class RetrieverSettings:
    """How the corpus is chunked and searched; errors name the field (as the env config spells
    it). `encoder`: an HF sentence-encoder directory for dense and hybrid ("": all-MiniLM-L6-v2
    from its package)."""

    kind: str = "bm25"
    chunk_words: int = 100
    chunk_overlap: int = 20
    rrf_k: int = 60
    fusion_depth: int = 50
    encoder: str = ""

    def __post_init__(self):
        if self.kind not in RETRIEVERS:
            raise invalid(OWNER, "retriever", self.kind, f"one of {RETRIEVERS}")
        for name, value, least in (("chunk_words", self.chunk_words, 1),
                                   ("chunk_overlap", self.chunk_overlap, 0),
                                   ("rrf_k", self.rrf_k, 0), ("fusion_depth", self.fusion_depth, 1)):
            require_int(OWNER, name, value, least)
        if self.chunk_overlap >= self.chunk_words:
            raise invalid(OWNER, "chunk_overlap", self.chunk_overlap, "must be smaller than "
                             f"chunk_words={self.chunk_words}")


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A window of a passage's words; `id` is "{passage_id}#{number}"."""

    id: str
    passage_id: str
    title: str
    text: str
    source: str = ""


@dataclasses.dataclass(frozen=True)
class Hit:
    """One search result: the chunk, with its passage's provenance, and its score (BM25, cosine,
    or the fused reciprocal-rank score)."""

    chunk: Chunk
    score: float

    @property
    def passage_id(self) -> str:
        return self.chunk.passage_id


def chunk_passages(passages: Iterable[Passage], words: int = 100, overlap: int = 20
                   ) -> Iterator[Chunk]:
    """The chunks of `passages`, streamed (see the module docstring)."""
    stride = words - overlap
    for passage in passages:
        tokens = passage.text.split()
        start, number = 0, 0
        while True:
            yield Chunk(f"{passage.id}#{number}", passage.id, passage.title,
                        " ".join(tokens[start:start + words]), passage.source)
            if start + words >= len(tokens):
                break
            start, number = start + stride, number + 1


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], rrf_k: int = 60
                           ) -> list[tuple[int, float]]:
    """(row, fused score) best first, score(d) = sum_r 1 / (rrf_k + rank_r(d)) with ranks from 1;
    ties go to the row that appears first in the earliest ranking."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, 1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (rrf_k + rank)
    return sorted(fused.items(), key=lambda item: -item[1])  # sorted() is stable


class PassageRetriever:
    """Chunks `passages` once and searches them (see the module docstring). `encoder` is used by
    the dense and hybrid kinds; when None they load `settings.encoder` (or all-MiniLM-L6-v2)."""

    def __init__(self, passages: Iterable[Passage], settings: RetrieverSettings | None = None,
                 encoder: SentenceEncoder | None = None):
        from seetjax.retrieval.retriever import BM25Retriever, DenseRetriever

        self.settings = settings or RetrieverSettings()
        self.chunks = list(chunk_passages(passages, self.settings.chunk_words,
                                          self.settings.chunk_overlap))
        if not self.chunks:
            raise ValueError("PassageRetriever: the corpus has no passages")
        docs = [ToolDoc(c.id, c.title, f"{c.title}. {c.text}") for c in self.chunks]
        kind = self.settings.kind
        self._bm25 = BM25Retriever(docs) if kind in ("bm25", "hybrid") else None
        self._dense = None
        if kind in ("dense", "hybrid"):
            self._dense = DenseRetriever(encoder or _load_encoder(self.settings.encoder), docs,
                                         strict=False)

    def __len__(self) -> int:
        return len(self.chunks)

    def search(self, query: str, k: int) -> list[Hit]:
        """The `k` best chunks for `query`, best first; an empty query raises
        `seetjax.retrieval.sentence.EmptyQueryError`."""
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if k < 1:
            raise invalid(self, "k", k, "must be >= 1")
        k = min(k, len(self.chunks))
        if self._bm25 is None or self._dense is None:
            rows, scores = (self._bm25 or self._dense).search(queries, k)
            return [[Hit(self.chunks[r], float(s)) for r, s in zip(row, score)]
                    for row, score in zip(rows, scores)]
        depth = min(max(k, self.settings.fusion_depth), len(self.chunks))
        lexical = self._bm25.search(queries, depth)[0]
        dense = self._dense.search(queries, depth)[0]
        return [[Hit(self.chunks[r], s) for r, s in
                 reciprocal_rank_fusion([a.tolist(), b.tolist()], self.settings.rrf_k)[:k]]
                for a, b in zip(lexical, dense)]


def _load_encoder(encoder: str) -> SentenceEncoder:
    from seetjax.retrieval.hf_encoder import minilm_dir
    from seetjax.retrieval.sentence import SentenceEncoder

    return SentenceEncoder.from_dir(Path(encoder) if encoder else minilm_dir())


def passage_ranking(hits: Sequence[Hit]) -> list[str]:
    """The passages of `hits` in order, each at its first rank."""
    return list(dict.fromkeys(hit.passage_id for hit in hits))


def retrieval_metrics(retriever: PassageRetriever, queries: Sequence[str],
                      gold: Sequence[Collection[str]], k: int) -> dict[str, float]:
    """Mean Recall@k and MRR@k over `queries` of the passages among the top `k` hits, against
    each query's gold passage ids (every query needs at least one)."""
    if len(queries) != len(gold) or not queries:
        raise ValueError(f"{len(queries)} queries and {len(gold)} gold sets: need as many, >= 1")
    n_gold = np.array([len(g) for g in gold])
    if (n_gold == 0).any():
        raise ValueError("retrieval_metrics: a query without gold passages has no metric")
    ranked = [passage_ranking(hits) for hits in retriever.search_many(queries, k)]
    width = max(len(r) for r in ranked)
    hit = metrics.hits([r + [""] * (width - len(r)) for r in ranked], gold)  # "" is never gold
    return {f"recall@{k}": float(metrics.recall_at(hit, n_gold, k).mean()),
            f"mrr@{k}": float(metrics.reciprocal_rank(hit).mean())}
