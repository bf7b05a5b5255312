"""tests/tolerances.py's rules, checked on the CPU for every backend (the baseline-error rule on
real bf16 errors is in tests/models/test_transformer.py)."""

import jax
import numpy as np
import pytest

from tests.tolerances import assert_within_baseline_error, exact_f32, exact_f32_precision


def test_exact_f32_sets_highest_where_the_default_is_not_f32_and_nothing_on_the_cpu():
    assert exact_f32_precision("cpu") is None
    assert exact_f32_precision("gpu") == exact_f32_precision("tpu") == "highest"
    before = jax.config.jax_default_matmul_precision
    with exact_f32("gpu"):
        assert jax.config.jax_default_matmul_precision == "highest"
    assert jax.config.jax_default_matmul_precision == before
    with exact_f32("cpu"):
        assert jax.config.jax_default_matmul_precision == before


def test_baseline_error_allows_eps_of_the_reference_and_rejects_mismatched_trees():
    reference = {"a": np.ones(4), "b": np.full(4, 2.0)}
    exact = {"a": np.ones(4), "b": np.full(4, 2.0)}
    assert_within_baseline_error({"a": np.ones(4) + 1e-3, "b": exact["b"]}, exact, reference)
    with pytest.raises(AssertionError, match=r"\['a'\]: RMS error 0.002 > 0.001"):
        assert_within_baseline_error({"a": np.ones(4) + 2e-3, "b": exact["b"]}, exact, reference)
    with pytest.raises(AssertionError, match=r"\['b'\]"):
        assert_within_baseline_error({"a": exact["a"], "b": np.full(4, np.nan)}, exact, reference)
    with pytest.raises(ValueError, match="1 candidate, 2 baseline and 2 reference leaves"):
        assert_within_baseline_error({"a": exact["a"]}, exact, reference)
