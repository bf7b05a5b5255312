"""Text-level retrievers over a tool corpus: `search(queries, k) -> (doc rows [Q, k], scores)`.

`DenseRetriever`: a `SentenceEncoder` embeds the documents once into an `Index`; queries are
checked (`QueryError`: empty, or longer than the encoder reads) and embedded. `BM25Retriever`:
Okapi BM25 (Robertson & Zaragoza 2009) from `bm25s`, the lexical baseline and the miner of hard
negatives (`hard_negatives`: the best-scoring documents that are not gold).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import numpy as np

from seetjax.retrieval.corpus import ToolDoc
from seetjax.retrieval.index import ExactIndex, Index
from seetjax.retrieval.sentence import SentenceEncoder, check_not_empty


class Retriever(Protocol):
    docs: Sequence[ToolDoc]

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]: ...


class DenseRetriever:
    """`strict=False` cuts over-long queries as sentence-transformers does instead of refusing
    them (benchmarks on fixed query sets); empty queries are refused either way."""

    def __init__(self, encoder: SentenceEncoder, docs: Sequence[ToolDoc], batch_size: int = 64,
                 index: type[Index] = ExactIndex, strict: bool = True):
        self.encoder = encoder
        self.docs = list(docs)
        self.batch_size = batch_size
        self.strict = strict
        self.index = index(encoder.encode([d.text for d in self.docs], batch_size))

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.strict:
            self.encoder.check_queries(queries)
        else:
            check_not_empty(queries)
        return self.index.search(self.encoder.encode(queries, self.batch_size), k)


def top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the k best per row of `scores` [Q, N], ties to the lower row."""
    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return rows, np.take_along_axis(scores, rows, axis=1)


class BM25Retriever:
    def __init__(self, docs: Sequence[ToolDoc]):
        # Imported here, not with the module: importing bm25s runs a JAX computation (its jax
        # backend), which starts XLA's CPU client before a multi-process run can call
        # jax.distributed.initialize (config files import this module through the SFT data).
        import bm25s
        self.docs = list(docs)
        self._bm25 = bm25s.BM25()
        self._bm25.index(bm25s.tokenize([d.text for d in self.docs], show_progress=False),
                         show_progress=False)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """BM25 scores [Q, N] of every document for each query."""
        check_not_empty(queries)
        import bm25s  # see __init__
        tokens = bm25s.tokenize(list(queries), return_ids=False, show_progress=False)
        # A query of stopwords only (or only words of one letter) has no terms: it scores 0.
        return np.stack([self._bm25.get_scores(t) if t else np.zeros(len(self.docs))
                         for t in tokens]).astype(np.float32)

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return top_k_rows(self.scores(queries), min(k, len(self.docs)))

    def hard_negatives(self, queries: Sequence[str], gold: Sequence[Collection[str]], k: int,
                       excluded: Collection[str] = ()) -> np.ndarray:
        """Rows [Q, k] of the k best-scoring documents per query that are neither its gold nor
        `excluded` (doc ids). Karpukhin et al. (2020): BM25 negatives that look relevant but are
        not teach what the in-batch ones cannot."""
        scores = self.scores(queries)
        ids = np.array([d.id for d in self.docs])
        scores[:, np.isin(ids, list(excluded))] = -np.inf
        for i, g in enumerate(gold):
            scores[i, np.isin(ids, list(g))] = -np.inf
        return top_k_rows(scores, k)[0]
