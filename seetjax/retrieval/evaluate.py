"""Retrievers compared on the test sets of a split: metric means with bootstrap intervals.

Each system ranks the whole corpus for every test query once; `METRICS` are computed per query
on the top `depth` documents (MRR is 0 when no gold doc is within them) and averaged over each
test set, with a percentile-bootstrap interval over its queries. The no-tool queries have no
ranking metric; for them the table reports how well the top-1 score tells a query some tool fits
from one that none does (AUROC over the test queries with and without gold). `difference` rows
compare two systems query by query (paired bootstrap).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from seetjax.report.bootstrap import bootstrap_interval
from seetjax.retrieval.bfcl_tools import Query, Split
from seetjax.retrieval.metrics import METRICS, auroc, per_query
from seetjax.retrieval.retriever import Retriever


@dataclasses.dataclass(frozen=True)
class Result:
    system: str
    test_set: str
    queries: int
    mean: Mapping[str, float]
    interval: Mapping[str, tuple[float, float]]
    values: Mapping[str, np.ndarray] = dataclasses.field(repr=False)  # per query, in order


def rank(retriever: Retriever, queries: Sequence[Query],
         depth: int) -> tuple[list[list[str]], np.ndarray]:
    """(doc ids best first, top-1 scores) of each query."""
    rows, scores = retriever.search([q.text for q in queries], depth)
    return [[retriever.docs[r].id for r in row] for row in rows], scores[:, 0]


def summarize(system: str, test_set: str, values: Mapping[str, np.ndarray],
              confidence: float = 0.95, seed: int = 0) -> Result:
    n = len(next(iter(values.values())))
    return Result(system, test_set, n, {m: float(values[m].mean()) for m in METRICS},
                  {m: bootstrap_interval(values[m], confidence, seed=seed) for m in METRICS},
                  values)


def difference(a: Result, b: Result) -> Result:
    """`a` - `b` query by query on the same test set, with the paired bootstrap interval of the
    mean difference: an interval above 0 says `a` is better on these queries, a sharper test
    than comparing the two systems' own intervals (which ignore that the queries are shared)."""
    if (a.test_set, a.queries) != (b.test_set, b.queries):
        raise ValueError(f"difference: {a.system} on {a.test_set} ({a.queries} queries) vs "
                         f"{b.system} on {b.test_set} ({b.queries})")
    return summarize(f"{a.system} - {b.system}", a.test_set,
                     {m: a.values[m] - b.values[m] for m in METRICS})


def evaluate_system(system: str, retriever: Retriever, split: Split,
                    depth: int = 100) -> tuple[list[Result], float]:
    """(a Result per test set with gold, the no-tool AUROC of the top-1 score)."""
    test_sets = {"seen": split.seen_test, "unseen": split.unseen_test}
    every = [q for qs in test_sets.values() for q in qs] + list(split.no_tool_test)
    ranked, top = rank(retriever, every, depth)
    results, start = [], 0
    for name, queries in test_sets.items():
        end = start + len(queries)
        results.append(summarize(system, name, per_query(ranked[start:end],
                                                         [set(q.gold) for q in queries])))
        start = end
    return results, auroc(top[:start], top[start:])


def results_table(results: Sequence[Result], no_tool: Mapping[str, float]) -> str:
    """A Markdown table: one row per (system, test set), `mean [low, high]` per metric, and each
    system's no-tool AUROC (none for a difference)."""
    header = ["system", "test set", "queries", *METRICS, "no-tool AUROC"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        cells = [f"{r.mean[m]:.3f} [{r.interval[m][0]:.3f}, {r.interval[m][1]:.3f}]"
                 for m in METRICS]
        auc = f"{no_tool[r.system]:.3f}" if r.system in no_tool else "-"
        lines.append(f"| {r.system} | {r.test_set} | {r.queries} | " + " | ".join(cells)
                     + f" | {auc} |")
    return "\n".join(lines)
