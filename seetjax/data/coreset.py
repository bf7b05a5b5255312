"""Coreset selection before training: keep the `size` examples most worth training on.

Strategies:
- random: a uniform sample without replacement (the baseline).
- loss_topk: the highest mean token loss under the current model (what it knows least).
- diversity: k-center greedy over embeddings (Gonzalez 1985; as a core-set, Sener & Savarese
  2018): start at the example nearest the mean, then repeatedly add the example farthest from
  everything chosen, minimising the largest distance from any example to its nearest chosen one.
- hybrid: a `hybrid_loss_fraction` of the budget by loss_topk, the rest by k-center greedy started
  from those, so the diverse part covers what the high-loss part left out.

Losses already in the data (a dialog's metadata `loss`) are used as they are, never recomputed;
the others are computed with a `ModelScorer`. Embeddings are the model's (mean final hidden
states) or, with `embedding="ngram"` or no model, hashed token n-grams. Ties break by position, so
selection is deterministic.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from seetjax.data.formatter import Example
from seetjax.data.scoring import ModelScorer, ngram_embeddings
from seetjax.errors import invalid

log = logging.getLogger(__name__)

STRATEGIES = ("none", "random", "loss_topk", "diversity", "hybrid")
EMBEDDINGS = ("auto", "model", "ngram")


@dataclasses.dataclass(frozen=True)
class CoresetConfig:
    """strategy: one of STRATEGIES ("none" keeps everything). size: examples to keep, or
    fraction: the share of them to keep (set one). hybrid_loss_fraction: share of a hybrid
    budget chosen by loss. embedding: "model", "ngram", or "auto" (the model's when there is
    one). seed: of the random strategy."""

    strategy: str = "none"
    size: int = 0
    fraction: float = 0.0
    hybrid_loss_fraction: float = 0.5
    embedding: str = "auto"
    seed: int = 0

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise invalid(self, "strategy", self.strategy, f"one of {STRATEGIES}")
        if self.embedding not in EMBEDDINGS:
            raise invalid(self, "embedding", self.embedding, f"one of {EMBEDDINGS}")
        if self.size < 0 or not 0.0 <= self.fraction <= 1.0:
            raise invalid(self, "size", self.size, f"must be >= 0 and fraction={self.fraction} "
                          "in [0, 1]")
        if self.strategy != "none" and (self.size > 0) == (self.fraction > 0):
            raise invalid(self, "size", self.size, f"strategy {self.strategy!r} needs exactly one of "
                          f"size and fraction (fraction={self.fraction})")
        if not 0.0 <= self.hybrid_loss_fraction <= 1.0:
            raise invalid(self, "hybrid_loss_fraction", self.hybrid_loss_fraction,
                          "must be in [0, 1]")

    @property
    def uses_model(self) -> bool:
        """Whether selection reads the model (losses, or model embeddings); without one, losses
        must be in the data and embeddings are n-grams."""
        return (self.strategy in ("loss_topk", "hybrid")
                or self.strategy == "diversity" and self.embedding != "ngram")

    def target(self, n: int) -> int:
        """Examples kept out of n."""
        if self.strategy == "none":
            return n
        return min(n, self.size if self.size else max(1, round(self.fraction * n)))


def random_subset(n: int, k: int, seed: int) -> np.ndarray:
    """k distinct indices of range(n), uniformly at random."""
    return np.sort(np.random.default_rng(seed).choice(n, size=min(k, n), replace=False))


def loss_topk(losses: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest losses (earlier index first among equals)."""
    return np.sort(np.argsort(-np.asarray(losses), kind="stable")[:k])


def k_center_greedy(embeddings: np.ndarray, k: int, initial: Sequence[int] = ()) -> np.ndarray:
    """Farthest-first traversal (Gonzalez 1985): `initial` plus k - len(initial) more indices,
    each the point farthest (Euclidean) from all chosen so far. Without `initial` it starts at
    the point nearest the mean. O(n k d) time, O(n) extra memory."""
    x = np.asarray(embeddings, np.float64)
    n = len(x)
    chosen = list(dict.fromkeys(int(i) for i in initial))
    if k <= len(chosen) or n == 0:
        return np.sort(np.asarray(chosen[:k], np.int64))
    if not chosen:
        chosen.append(int(np.argmin(((x - x.mean(0)) ** 2).sum(1))))
    nearest = np.full(n, np.inf)
    for c in chosen:
        nearest = np.minimum(nearest, ((x - x[c]) ** 2).sum(1))
    while len(chosen) < min(k, n):
        far = int(np.argmax(nearest))
        if nearest[far] <= 0:  # everything left duplicates a chosen point: take them in order
            taken = set(chosen)
            rest = [i for i in range(n) if i not in taken]
            chosen += rest[:min(k, n) - len(chosen)]
            break
        chosen.append(far)
        nearest = np.minimum(nearest, ((x - x[far]) ** 2).sum(1))
    return np.sort(np.asarray(chosen, np.int64))


def select_indices(config: CoresetConfig, n: int, losses: np.ndarray | None = None,
                   embeddings: np.ndarray | None = None) -> np.ndarray:
    """The indices `config` keeps out of n examples, given their losses and embeddings (each
    needed only by the strategies that read it)."""
    k = config.target(n)
    if k >= n:
        return np.arange(n)
    needs_loss = config.strategy in ("loss_topk", "hybrid")
    needs_embedding = config.strategy in ("diversity", "hybrid")
    if needs_loss and (losses is None or len(losses) != n):
        raise ValueError(f"coreset {config.strategy!r} needs one loss per example")
    if needs_embedding and (embeddings is None or len(embeddings) != n):
        raise ValueError(f"coreset {config.strategy!r} needs one embedding per example")
    if config.strategy == "random":
        return random_subset(n, k, config.seed)
    if config.strategy == "loss_topk":
        return loss_topk(losses, k)
    if config.strategy == "diversity":
        return k_center_greedy(embeddings, k)
    by_loss = loss_topk(losses, round(k * config.hybrid_loss_fraction))
    return k_center_greedy(embeddings, k, initial=by_loss)


def select_coreset(examples: Sequence[Example], config: CoresetConfig,
                   scorer: ModelScorer | None = None) -> tuple[list[Example], dict[str, Any]]:
    """The examples `config` keeps (in their original order) and a report of the selection.

    With a scorer every example leaves with a loss: its own from the data, else the model's.
    """
    examples = list(examples)
    if config.strategy == "none":
        return examples, _report(config, examples, examples, computed=0, embedding=None)
    needs_loss = config.strategy in ("loss_topk", "hybrid")
    embedding = None
    if config.strategy in ("diversity", "hybrid"):
        embedding = config.embedding
        if embedding == "auto":
            embedding = "model" if scorer is not None else "ngram"
        if embedding == "model" and scorer is None:
            raise ValueError("coreset embedding 'model' needs a model to score with")
    missing = [i for i, e in enumerate(examples) if e.loss is None]
    if needs_loss and missing and scorer is None:
        raise ValueError(f"coreset {config.strategy!r}: {len(missing)} examples carry no loss "
                         f"(e.g. {examples[missing[0]].id!r}) and there is no model to compute it")
    embeddings = None
    computed = 0
    if scorer is not None:
        # One pass: embeddings need every example, losses only those without one.
        todo = list(range(len(examples))) if embedding == "model" else missing
        scores = scorer([examples[i] for i in todo])
        for row, i in enumerate(todo):
            if examples[i].loss is None:
                examples[i] = dataclasses.replace(examples[i], loss=float(scores.losses[row]))
                computed += 1
        if embedding == "model":
            embeddings = scores.embeddings
    if embedding == "ngram":
        embeddings = ngram_embeddings(examples)
    losses = (np.array([e.loss for e in examples], np.float64) if needs_loss else None)
    keep = select_indices(config, len(examples), losses, embeddings)
    selected = [examples[i] for i in keep]
    return selected, _report(config, examples, selected, computed, embedding)


def _report(config: CoresetConfig, before: list[Example], after: list[Example], computed: int,
            embedding: str | None) -> dict[str, Any]:
    def stats(examples: list[Example]) -> dict[str, Any]:
        losses = [e.loss for e in examples if e.loss is not None]
        counts: dict[str, int] = {}
        for e in examples:
            counts[e.task_type] = counts.get(e.task_type, 0) + 1
        return {"examples": len(examples),
                "mean_loss": float(np.mean(losses)) if losses else None,
                "mean_tokens": float(np.mean([e.num_tokens for e in examples])) if examples else 0,
                "mean_lexical_diversity": float(np.mean([e.lexical_diversity for e in examples]))
                if examples else 0, "task_types": counts}

    report = {"strategy": config.strategy, "embedding": embedding, "losses_computed": computed,
              "before": stats(before), "after": stats(after)}
    log.info("coreset %s: kept %d of %d examples", config.strategy, len(after), len(before))
    return report
