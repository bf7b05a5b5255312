"""Aggregation modes against their formulas; micro-batch shares add up to the global value."""

import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.losses.aggregation import AGGREGATIONS, Denominators, aggregate


def np_aggregate(v, m, mode, c=1.0):
    rows = m.sum(1) > 0
    if mode == "token-mean":
        return (v * m).sum() / m.sum()
    if mode == "seq-mean-token-mean":
        return ((v * m).sum(1)[rows] / m.sum(1)[rows]).mean()
    if mode == "seq-mean-token-sum":
        return (v * m).sum(1)[rows].mean()
    return (v * m).sum(1)[rows].sum() / (rows.sum() * c)


def _data(seed=0):
    rng = np.random.RandomState(seed)
    v = rng.randn(6, 7).astype(np.float32)
    m = (rng.rand(6, 7) > 0.4).astype(np.float32)
    m[2] = 0  # a row without loss tokens counts in no denominator
    return v, m


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregate_matches_formula(mode):
    v, m = _data()
    got = aggregate(jnp.asarray(v), jnp.asarray(m), mode, norm_constant=32.0)
    np.testing.assert_allclose(got, np_aggregate(v.astype(np.float64), m, mode, 32.0), rtol=1e-5)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_micro_batch_shares_sum_to_the_global_value(mode):
    v, m = _data(1)
    d = Denominators.of(jnp.asarray(m))
    shares = sum(aggregate(jnp.asarray(v[i:i + 2]), jnp.asarray(m[i:i + 2]), mode, d, 32.0)
                 for i in range(0, 6, 2))
    np.testing.assert_allclose(shares, np_aggregate(v.astype(np.float64), m, mode, 32.0),
                               rtol=1e-5)


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="token-avg"):
        aggregate(jnp.ones((1, 2)), jnp.ones((1, 2)), "token-avg")
