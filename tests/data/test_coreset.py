"""Coreset strategies on constructed data: each does what its name says."""

import dataclasses

import numpy as np
import pytest

from seetjax.data.coreset import (
    CoresetConfig,
    k_center_greedy,
    loss_topk,
    random_subset,
    select_coreset,
    select_indices,
)
from seetjax.data.scoring import Scores
from tests.data.conftest import make_examples


def clusters(sizes, seed=0, spread=0.01):
    """Points in tight clusters around far-apart centres; returns (points, cluster of each)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(sizes), 8)) * 10
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return centres[labels] + rng.normal(size=(len(labels), 8)) * spread, labels


def covering_radius(points, chosen):
    d = ((points[:, None] - points[chosen][None]) ** 2).sum(-1)
    return np.sqrt(d.min(1).max())


def test_random_is_uniform_and_seeded():
    assert len(set(random_subset(100, 10, 0))) == 10
    np.testing.assert_array_equal(random_subset(100, 10, 0), random_subset(100, 10, 0))
    assert not np.array_equal(random_subset(100, 10, 0), random_subset(100, 10, 1))
    hits = np.zeros(100)
    for seed in range(400):
        hits[random_subset(100, 10, seed)] += 1
    assert hits.sum() == 4000 and hits.min() > 15 and hits.max() < 70  # ~40 each


def test_loss_topk_keeps_the_highest_losses():
    losses = np.array([0.5, 3.0, 1.0, 3.0, 2.0, 0.1])
    np.testing.assert_array_equal(loss_topk(losses, 3), [1, 3, 4])
    np.testing.assert_array_equal(loss_topk(losses, 1), [1])  # ties: earlier first


def test_diversity_covers_every_cluster_where_random_does_not():
    points, labels = clusters([200, 3, 3, 3, 3])
    chosen = k_center_greedy(points, 5)
    assert sorted(labels[chosen]) == [0, 1, 2, 3, 4]
    # random picks mostly from the big cluster and leaves small ones uncovered
    assert len(set(labels[random_subset(len(points), 5, 0)])) < 5
    assert covering_radius(points, chosen) < covering_radius(points,
                                                             random_subset(len(points), 5, 0))
    # greedy k-center is a 2-approximation: no 5 points cover much better than these
    assert covering_radius(points, chosen) < 0.1


def test_k_center_greedy_details():
    points = np.array([[0.0], [1.0], [2.0], [10.0], [10.0]])
    np.testing.assert_array_equal(k_center_greedy(points, 1), [2])  # nearest the mean (4.6)
    np.testing.assert_array_equal(k_center_greedy(points, 2), [2, 3])
    np.testing.assert_array_equal(k_center_greedy(points, 3, initial=[4]), [0, 2, 4])
    np.testing.assert_array_equal(k_center_greedy(np.zeros((4, 2)), 3), [0, 1, 2])  # duplicates


def test_hybrid_takes_high_losses_then_covers_the_rest():
    points, labels = clusters([50, 50, 5, 5])
    losses = np.where(labels == 0, 5.0, 1.0) + np.linspace(0, 0.1, len(labels))
    config = CoresetConfig(strategy="hybrid", size=6, hybrid_loss_fraction=0.5)
    chosen = select_indices(config, len(points), losses, points)
    by_loss = loss_topk(losses, 3)
    assert set(by_loss) <= set(chosen) and set(labels[by_loss]) == {0}
    assert set(labels[chosen]) == {0, 1, 2, 3}  # the diverse half reaches every other cluster
    only_loss = select_indices(dataclasses.replace(config, strategy="loss_topk"), len(points),
                               losses, points)
    assert set(labels[only_loss]) == {0}


class CountingScorer:
    """A stand-in for ModelScorer: loss = 10 + number of tokens, embedding = one-hot length."""

    def __init__(self):
        self.scored = []

    def __call__(self, examples):
        self.scored += [e.id for e in examples]
        return Scores(np.array([10.0 + e.num_tokens for e in examples], np.float32),
                      np.eye(64, dtype=np.float32)[[e.num_tokens for e in examples]])


def test_losses_in_the_data_are_respected_not_recomputed():
    examples = make_examples(10)
    examples = [dataclasses.replace(e, loss=None if i % 2 else float(i)) for i, e in
                enumerate(examples)]
    scorer = CountingScorer()
    kept, report = select_coreset(examples, CoresetConfig(strategy="loss_topk", size=3), scorer)
    assert scorer.scored == [e.id for e in examples[1::2]]  # only those without a loss
    assert report["losses_computed"] == 5
    assert [e.loss for e in examples[::2]] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert all(e.loss >= 16 for e in kept)  # computed 10 + length (>= 6) beat the given ones
    assert report["before"]["examples"] == 10 and report["after"]["examples"] == 3


def test_select_coreset_embeddings_and_errors():
    examples = make_examples(20)
    kept, report = select_coreset(examples, CoresetConfig(strategy="diversity", fraction=0.25))
    assert report["embedding"] == "ngram" and len(kept) == 5
    kept, report = select_coreset(examples, CoresetConfig(strategy="diversity", size=5),
                                  CountingScorer())
    assert report["embedding"] == "model"
    assert len({e.num_tokens for e in kept}) == 5  # one-hot lengths: all different
    assert all(e.loss is not None for e in kept)  # with a scorer every example carries a loss
    kept, report = select_coreset(examples, CoresetConfig(strategy="none"))
    assert kept == examples and report["after"]["examples"] == 20
    with pytest.raises(ValueError, match="20 examples carry no loss"):
        select_coreset([dataclasses.replace(e, loss=None) for e in examples],
                       CoresetConfig(strategy="loss_topk", size=3))
    with pytest.raises(ValueError, match="embedding 'model' needs a model"):
        select_coreset(examples, CoresetConfig(strategy="diversity", size=3, embedding="model"))


@pytest.mark.parametrize("kwargs, message", [
    (dict(strategy="best"), "strategy='best'"), (dict(strategy="random"), "exactly one of"),
    (dict(strategy="random", size=3, fraction=0.5), "exactly one of"),
    (dict(fraction=1.5), "fraction=1.5"), (dict(embedding="bert"), "embedding='bert'"),
])
def test_bad_configs_fail_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CoresetConfig(**kwargs)
