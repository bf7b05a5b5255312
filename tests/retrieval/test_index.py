"""Exact inner-product search against numpy."""

import numpy as np
import pytest

from seetjax.retrieval.index import ExactIndex


def test_exact_index_matches_numpy_top_k():
    rng = np.random.default_rng(0)
    docs, queries = rng.normal(size=(50, 8)), rng.normal(size=(6, 8))
    rows, scores = ExactIndex(docs).search(queries, 5)
    expected = np.argsort(-(queries @ docs.T), axis=1)[:, :5]
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ docs.T, expected, 1),
                               rtol=1e-5)


def test_k_is_capped_at_the_corpus_size_and_bad_shapes_are_named():
    index = ExactIndex(np.eye(3))
    rows, _ = index.search(np.eye(3), 10)
    assert rows.shape == (3, 3) and rows[:, 0].tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"expected \[Q, 3\]"):
        index.search(np.ones((2, 4)), 1)
    with pytest.raises(ValueError, match="non-empty"):
        ExactIndex(np.zeros((0, 3)))
