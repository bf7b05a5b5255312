"""Ranking metrics per query, with binary relevance (intervals of their means: seetjax.report.bootstrap).

For a ranking r_1, r_2, ... of query q with gold set G:
- Recall@k = |G ∩ {r_1..r_k}| / |G|
- NDCG@k = DCG@k / IDCG@k, DCG@k = sum_{i<=k} [r_i in G] / log2(i + 1), IDCG@k the DCG of a
  ranking with all of G first (Järvelin & Kekäläinen 2002)
- MRR = 1 / (rank of the first gold document), 0 when none is in the ranking (Voorhees 1999)
Queries without gold have no such metric and are left out by the callers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr")


def hits(ranked: Sequence[Sequence[str]], gold: Sequence[Collection[str]]) -> np.ndarray:
    """[Q, K] float: whether the document at each rank is gold for its query."""
    return np.array([[doc in g for doc in r] for r, g in zip(ranked, gold)], np.float64)


def recall_at(hit: np.ndarray, n_gold: np.ndarray, k: int) -> np.ndarray:
    return hit[:, :k].sum(axis=1) / n_gold


def ndcg_at(hit: np.ndarray, n_gold: np.ndarray, k: int) -> np.ndarray:
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (hit[:, :k] * discounts[:hit[:, :k].shape[1]]).sum(axis=1)
    ideal = np.cumsum(discounts)[np.minimum(n_gold, k) - 1]
    return dcg / ideal


def reciprocal_rank(hit: np.ndarray) -> np.ndarray:
    first = np.argmax(hit > 0, axis=1)
    return np.where(hit.any(axis=1), 1.0 / (first + 1), 0.0)


def per_query(ranked: Sequence[Sequence[str]],
              gold: Sequence[Collection[str]]) -> dict[str, np.ndarray]:
    """Each metric of `METRICS` for each query ([Q] arrays); every query must have gold."""
    n_gold = np.array([len(g) for g in gold])
    if (n_gold == 0).any():
        raise ValueError("per_query: a query without gold documents has no ranking metric")
    hit = hits(ranked, gold)
    return {"recall@1": recall_at(hit, n_gold, 1), "recall@5": recall_at(hit, n_gold, 5),
            "recall@10": recall_at(hit, n_gold, 10), "ndcg@10": ndcg_at(hit, n_gold, 10),
            "mrr": reciprocal_rank(hit)}


def auroc(positive: np.ndarray, negative: np.ndarray) -> float:
    """Area under the ROC curve of telling `positive` scores from `negative` ones: the
    probability that a positive outscores a negative, ties counting half (Mann-Whitney U)."""
    greater = (positive[:, None] > negative[None, :]).mean()
    ties = (positive[:, None] == negative[None, :]).mean()
    return float(greater + ties / 2)
