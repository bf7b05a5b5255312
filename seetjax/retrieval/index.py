"""Vector indexes behind one small interface: `search(queries [Q, D], k) -> (ids [Q, k], scores)`.

`ExactIndex` scores every document with one matmul and takes the top k (`jax.lax.top_k`), jitted;
it is exact and, for a tool library of a few thousand docs (3.3k x 384 floats: 5 MB), the fastest
choice. `HnswIndex` is faiss's HNSW graph (Malkov & Yashunin 2018) under the same inner product:
approximate, sub-linear per query, for libraries far larger than BFCL's. `INDEXES` names both
(`launch/retrieval.py --index`).
"""

from __future__ import annotations

import functools
from typing import Protocol

import faiss
import jax
import jax.numpy as jnp
import numpy as np

from seetjax.errors import invalid, require


class Index(Protocol):
    def __len__(self) -> int: ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(document rows [Q, k] best first, their scores [Q, k]) for query vectors [Q, D]."""
        ...


@functools.partial(jax.jit, static_argnames="k")
def top_k_inner_product(queries: jax.Array, docs: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """(rows, scores) of the k largest <q, d> per query; ties go to the lower row."""
    scores, rows = jax.lax.top_k(queries @ docs.T, k)
    return rows, scores


def check_vectors(owner: str, vectors: np.ndarray) -> None:
    """Refuses anything but a non-empty [N, D] array, naming `owner` and the shape."""
    if vectors.ndim != 2 or not len(vectors) or not vectors.shape[1]:
        raise invalid(owner, "vectors.shape", vectors.shape, "must be a non-empty [N, D] array")


def check_queries(owner: str, queries: np.ndarray, dim: int, k: int) -> None:
    """Refuses queries that are not [Q, dim], or k < 1, naming `owner` and what is wrong."""
    if queries.ndim != 2 or queries.shape[1] != dim:
        raise invalid(owner, "queries.shape", queries.shape, f"must be [Q, {dim}]")
    if k < 1:
        raise invalid(owner, "k", k, "must be >= 1")


class ExactIndex:
    """Inner-product search over all documents (cosine similarity for unit-norm vectors)."""

    def __init__(self, vectors: np.ndarray):
        check_vectors("ExactIndex", vectors)
        self._docs = jnp.asarray(vectors, jnp.float32)

    def __len__(self) -> int:
        return self._docs.shape[0]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        check_queries("ExactIndex.search", queries, self._docs.shape[1], k)
        k = min(k, len(self))
        rows, scores = top_k_inner_product(jnp.asarray(queries, jnp.float32), self._docs, k)
        return np.asarray(rows), np.asarray(scores)


class HnswIndex:
    """Approximate inner-product search on faiss's HNSW graph (`IndexHNSWFlat`, vectors stored
    uncompressed). `m`: graph neighbours per node; `ef_construction`, `ef_search`: candidate lists
    while building and searching (larger: better recall, slower); a search looks at no fewer
    candidates than the k it returns. Scores are the exact inner products of the rows found.
    Built with several threads the graph can differ from build to build in near ties."""

    def __init__(self, vectors: np.ndarray, m: int = 32, ef_construction: int = 128,
                 ef_search: int = 128):
        check_vectors("HnswIndex", vectors)
        for name, value in (("m", m), ("ef_construction", ef_construction),
                            ("ef_search", ef_search)):
            require(value >= 1, self, name, value, "must be >= 1")
        self._index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        self._index.hnsw.efConstruction = ef_construction
        self._ef_search = ef_search
        self._index.add(np.ascontiguousarray(vectors, np.float32))

    def __len__(self) -> int:
        return self._index.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        check_queries("HnswIndex.search", queries, self._index.d, k)
        k = min(k, len(self))
        self._index.hnsw.efSearch = max(self._ef_search, k)
        scores, rows = self._index.search(np.ascontiguousarray(queries, np.float32), k)
        return rows.astype(np.int32), scores


INDEXES: dict[str, type[Index]] = {"exact": ExactIndex, "hnsw": HnswIndex}
