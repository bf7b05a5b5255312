"""Vector indexes behind one small interface: `search(queries [Q, D], k) -> (ids [Q, k], scores)`.

`ExactIndex` scores every document with one matmul and takes the top k (`jax.lax.top_k`), jitted;
it is exact and, for a tool library of a few thousand docs (3.3k x 384 floats: 5 MB), the fastest
choice. An approximate index for far larger corpora would implement the same protocol.
"""

from __future__ import annotations

import functools
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np


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


class ExactIndex:
    """Inner-product search over all documents (cosine similarity for unit-norm vectors)."""

    def __init__(self, vectors: np.ndarray):
        if vectors.ndim != 2 or not len(vectors):
            raise ValueError(f"ExactIndex: vectors must be a non-empty [N, D] array, got shape "
                             f"{vectors.shape}")
        self._docs = jnp.asarray(vectors, jnp.float32)

    def __len__(self) -> int:
        return self._docs.shape[0]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if queries.ndim != 2 or queries.shape[1] != self._docs.shape[1]:
            raise ValueError(f"ExactIndex.search: queries of shape {queries.shape}, expected "
                             f"[Q, {self._docs.shape[1]}]")
        k = min(k, len(self))
        rows, scores = top_k_inner_product(jnp.asarray(queries, jnp.float32), self._docs, k)
        return np.asarray(rows), np.asarray(scores)
