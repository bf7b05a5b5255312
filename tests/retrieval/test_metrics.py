"""Ranking metrics by hand, against trec_eval (pytrec_eval), and their bootstrap intervals."""

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


# Our metric names as trec_eval names its measures.
TREC_EVAL = {"recall@1": "recall_1", "recall@5": "recall_5", "recall@10": "recall_10",
             "ndcg@10": "ndcg_cut_10", "mrr": "recip_rank"}


def test_matches_trec_eval_on_random_rankings():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    assert set(TREC_EVAL) == set(METRICS)
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(30)]
    ranked, gold = [], []
    for _ in range(40):
        ranked.append(list(rng.permutation(docs)[:20]))
        gold.append(set(rng.choice(docs, rng.integers(1, 4), replace=False)))
    qrels = {f"q{i}": {d: 1 for d in g} for i, g in enumerate(gold)}
    # Strictly decreasing scores: trec_eval orders by score, ours by position.
    run = {f"q{i}": {d: float(20 - r) for r, d in enumerate(docs_)}
           for i, docs_ in enumerate(ranked)}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, set(TREC_EVAL.values())).evaluate(run)
    ours = per_query(ranked, gold)
    for metric, measure in TREC_EVAL.items():
        np.testing.assert_allclose(ours[metric], [theirs[f"q{i}"][measure] for i in range(40)],
                                   atol=1e-12, err_msg=metric)


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
