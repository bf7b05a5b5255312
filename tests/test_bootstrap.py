"""The two-level (runs x items) bootstrap against a loop over its definition and its one-level
special case."""

import numpy as np
import pytest

from seetjax.bootstrap import bootstrap_interval, two_level_interval


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
