"""Exact inner-product search against numpy; the approximate index against the exact one."""

import numpy as np
import pytest

from seetjax.retrieval.index import INDEXES, ExactIndex, HnswIndex


def unit_vectors(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_index_matches_numpy_top_k():
    rng = np.random.default_rng(0)
    docs, queries = rng.normal(size=(50, 8)), rng.normal(size=(6, 8))
    rows, scores = ExactIndex(docs).search(queries, 5)
    expected = np.argsort(-(queries @ docs.T), axis=1)[:, :5]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ docs.T, expected, 1),
                               rtol=1e-5)


@pytest.mark.parametrize("index", INDEXES.values(), ids=INDEXES.keys())
def test_k_is_capped_at_the_corpus_size_and_bad_shapes_are_named(index):
    name = index.__name__
    built = index(np.eye(3))
    rows, _ = built.search(np.eye(3), 10)
    assert rows.shape == (3, 3) and rows[:, 0].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=rf"{name}.search.queries.shape=\(2, 4\): must be "
                                         r"\[Q, 3\]"):
        built.search(np.ones((2, 4)), 1)
    with pytest.raises(ValueError, match=rf"{name}.search.queries.shape=\(3,\)"):
        built.search(np.ones(3), 1)
    with pytest.raises(ValueError, match=rf"{name}.search.k=0: must be >= 1"):
        built.search(np.eye(3), 0)
    with pytest.raises(ValueError, match=rf"{name}.vectors.shape=\(0, 3\): must be a non-empty \[N, D\]"):
        index(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"vectors.shape=\(4,\)"):
        index(np.ones(4))


def test_hnsw_recall_at_10_against_exact_search():
    rng = np.random.default_rng(0)
    docs, queries = unit_vectors(rng, 5000, 64), unit_vectors(rng, 200, 64)
    exact, _ = ExactIndex(docs).search(queries, 10)
    approximate, scores = HnswIndex(docs).search(queries, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approximate, exact)])
    assert recall >= 0.95, recall
    # the scores are the inner products of the rows returned, best first
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, docs[approximate]),
                               rtol=1e-5, atol=1e-6)
    assert (np.diff(scores, axis=1) <= 1e-6).all()


def test_hnsw_equals_exact_search_on_a_tiny_corpus():
    rng = np.random.default_rng(1)
    docs, queries = unit_vectors(rng, 40, 16), unit_vectors(rng, 7, 16)
    exact_rows, exact_scores = ExactIndex(docs).search(queries, 5)
    rows, scores = HnswIndex(docs).search(queries, 5)
    np.testing.assert_array_equal(rows, exact_rows)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-6)
