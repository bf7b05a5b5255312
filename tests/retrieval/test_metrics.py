"""Ranking metrics by hand, against ranx, and their bootstrap intervals."""

import numpy as np
import pytest

from seetjax.report.bootstrap import bootstrap_interval
from seetjax.retrieval.metrics import METRICS, auroc, per_query


def test_hand_computed_example():
    ranked = [["a", "x", "b", "y"], ["x", "y", "z", "c"], ["x", "y", "z", "w"]]
    gold = [{"a", "b"}, {"c"}, {"q"}]
    m = per_query(ranked, gold)
    np.testing.assert_allclose(m["recall@1"], [0.5, 0, 0])
    np.testing.assert_allclose(m["recall@5"], [1, 1, 0])
    ideal = 1 + 1 / np.log2(3)
    np.testing.assert_allclose(m["ndcg@10"], [(1 + 1 / np.log2(4)) / ideal, 1 / np.log2(5), 0])
    np.testing.assert_allclose(m["mrr"], [1, 0.25, 0])


def test_queries_without_gold_are_refused():
    with pytest.raises(ValueError, match="without gold"):
        per_query([["a"]], [set()])


def test_matches_ranx_on_random_rankings():
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(30)]
    ranked, gold = [], []
    for _ in range(40):
        ranked.append(list(rng.permutation(docs)[:20]))
        gold.append(set(rng.choice(docs, rng.integers(1, 4), replace=False)))
    qrels = ranx.Qrels({f"q{i:02d}": {d: 1 for d in g} for i, g in enumerate(gold)})
    # Strictly decreasing scores: ranx orders by score, ours by position; ranx returns the
    # per-query values in sorted query-id order, hence the zero-padded ids.
    run = ranx.Run({f"q{i:02d}": {d: float(20 - r) for r, d in enumerate(docs_)}
                    for i, docs_ in enumerate(ranked)})
    theirs = ranx.evaluate(qrels, run, list(METRICS), return_mean=False)
    ours = per_query(ranked, gold)
    for metric in METRICS:
        np.testing.assert_allclose(ours[metric], theirs[metric], atol=1e-12, err_msg=metric)


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_queries():
    rng = np.random.default_rng(0)
    few, many = rng.random(30), rng.random(3000)
    low, high = bootstrap_interval(few)
    assert low < few.mean() < high
    assert bootstrap_interval(few) == (low, high)  # seeded: the same interval every time
    wide, narrow = high - low, np.subtract(*bootstrap_interval(many)[::-1])
    assert narrow < wide / 5


def test_auroc():
    assert auroc(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert auroc(np.array([1.0]), np.array([1.0])) == 0.5
    assert auroc(np.array([1.0, 3.0]), np.array([2.0])) == 0.5
