"""The two-level (runs x items) bootstrap against a loop over its definition and its one-level
special case; the expanded percentile interval's coverage over a few seeds."""

import numpy as np
import pytest
from scipy import stats

from seetjax.report.bootstrap import bootstrap_interval, expanded_confidence, two_level_interval


def test_two_level_interval_is_its_definition_written_as_a_loop():
    values = np.random.default_rng(1).random((4, 9))
    rng = np.random.default_rng(7)
    runs = rng.integers(0, 4, (300, 4))
    items = rng.integers(0, 9, (300, 9))
    means = [values[r][:, i].mean() for r, i in zip(runs, items, strict=True)]
    expected = np.quantile(means, [0.05, 0.95])
    np.testing.assert_allclose(two_level_interval(values, 0.9, 300, seed=7), expected, rtol=1e-12)


def test_items_that_do_not_vary_give_the_bootstrap_over_runs():
    run_means = np.array([0.1, 0.5, 0.3, 0.9, 0.4])
    values = np.repeat(run_means[:, None], 6, axis=1)
    assert two_level_interval(values, resamples=500, seed=3) == pytest.approx(
        bootstrap_interval(run_means, resamples=500, seed=3), abs=1e-12)


def test_both_sources_of_noise_widen_the_interval():
    rng = np.random.default_rng(0)
    values = rng.normal(0, 1, (5, 1)) + rng.normal(0, 1, (1, 96)) + rng.normal(0, 0.5, (5, 96))
    low, high = two_level_interval(values, resamples=4000)
    seeds_low, seeds_high = bootstrap_interval(values.mean(axis=1), resamples=4000)
    tasks_low, tasks_high = bootstrap_interval(values.mean(axis=0), resamples=4000)
    assert low < values.mean() < high
    assert high - low > max(seeds_high - seeds_low, tasks_high - tasks_low)


def test_the_expansion_vanishes_with_many_values_and_matches_a_t_interval_with_few():
    assert expanded_confidence(0.95, 1) == 0.95
    assert expanded_confidence(0.95, 10**6) == pytest.approx(0.95, abs=1e-5)
    assert expanded_confidence(0.95, 5) > expanded_confidence(0.95, 10) > 0.95
    # the expanded level's normal quantile is sqrt(n/(n-1)) t_{n-1}: Student's 2.776 at 4 df
    z = stats.norm.ppf((1 + expanded_confidence(0.95, 5)) / 2)
    assert z == pytest.approx(np.sqrt(5 / 4) * stats.t.ppf(0.975, 4), rel=1e-9)


@pytest.mark.parametrize("seeds, plain_at_most, expanded_at_least", [(5, 0.86, 0.88),
                                                                      (10, 0.925, 0.935)])
def test_over_a_few_seeds_the_expanded_interval_covers_more_nearly_its_level(seeds, plain_at_most,
                                                                           expanded_at_least):
    rng = np.random.default_rng(seeds)
    samples = rng.normal(0.0, 1.0, (400, seeds))  # 400 grids of a few seeds; the true mean is 0
    covered = {False: 0, True: 0}
    for i, values in enumerate(samples):
        for expanded in covered:
            low, high = bootstrap_interval(values, 0.95, 2000, seed=i, expanded=expanded)
            covered[expanded] += low <= 0.0 <= high
    assert covered[False] / 400 <= plain_at_most < expanded_at_least <= covered[True] / 400


def test_the_two_level_interval_expands_for_its_runs():
    values = np.arange(4.0)[:, None] + np.zeros((1, 6))
    assert two_level_interval(values, resamples=500, seed=3, expanded=True) == pytest.approx(
        bootstrap_interval(values[:, 0], resamples=500, seed=3, expanded=True), abs=1e-12)
