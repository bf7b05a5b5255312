"""Systems compared on a toy split: per-test-set results, paired differences, the table."""

import numpy as np
import pytest

from seetjax.retrieval.bfcl_tools import Query, Split
from seetjax.retrieval.corpus import tool_doc
from seetjax.retrieval.evaluate import difference, evaluate_system, results_table

DOCS = [tool_doc({"name": n}) for n in ("a", "b", "c")]
SPLIT = Split(train=(), seen_test=(Query("s0", "x", (DOCS[0].id,), "simple"),
                                   Query("s1", "y", (DOCS[1].id,), "simple")),
              unseen_test=(Query("u0", "z", (DOCS[2].id,), "simple"),),
              no_tool_test=(Query("n0", "w", (), "irrelevance"),), held_out_docs=frozenset())


class Fixed:
    """Ranks docs in a fixed order per query text, scores 3, 2, 1 (no-tool query: 1.5, ...)."""

    docs = DOCS

    def __init__(self, orders):
        self.orders = orders

    def search(self, queries, k):
        rows = np.array([self.orders[q] for q in queries])[:, :k]
        scores = np.array([[1.5, 1, 0.5] if q == "w" else [3, 2, 1] for q in queries])
        return rows, scores[:, :k]


def test_results_differences_and_table():
    good = Fixed({"x": [0, 1, 2], "y": [1, 0, 2], "z": [2, 0, 1], "w": [0, 1, 2]})
    bad = Fixed({"x": [1, 0, 2], "y": [0, 2, 1], "z": [2, 0, 1], "w": [0, 1, 2]})
    (seen, unseen), auc = evaluate_system("good", good, SPLIT)
    assert (seen.test_set, seen.queries, unseen.queries) == ("seen", 2, 1)
    assert seen.mean["recall@1"] == 1.0 and auc == 1.0
    (bad_seen, _), _ = evaluate_system("bad", bad, SPLIT)
    assert bad_seen.mean["mrr"] == pytest.approx((0.5 + 1 / 3) / 2)
    diff = difference(seen, bad_seen)
    assert diff.system == "good - bad" and diff.mean["recall@1"] == 1.0
    with pytest.raises(ValueError, match="difference"):
        difference(seen, unseen)
    table = results_table([seen, unseen, diff], {"good": auc})
    assert "| good | seen | 2 | 1.000 [1.000, 1.000]" in table
    assert table.splitlines()[-1].endswith("| - |")
