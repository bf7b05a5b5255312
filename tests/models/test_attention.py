"""The training attention kernel against XLA's own `jax.nn.dot_product_attention`, differentiated
by JAX: outputs and the gradients of q, k and v."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.models.attention import causal_blocked_attention
from seetjax.models.transformer import segment_mask

# Row 0: left padding then two packed segments; row 1: two segments then right padding.
SEGMENTS = np.asarray([[0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2], [1, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0]])


def _operands(dtype):
    rng = np.random.RandomState(0)
    b, t = SEGMENTS.shape
    q, k, v = (jnp.asarray(rng.randn(b, t, heads, 8), dtype) for heads in (4, 2, 2))
    cotangent = jnp.asarray(rng.randn(b, t, 4, 8) * (SEGMENTS > 0)[:, :, None, None], dtype)
    return q, k, v, cotangent


def _output_and_grads(attention, q, k, v, cotangent):
    out, pullback = jax.vjp(attention, q, k, v)
    return (out, *pullback(cotangent))


@pytest.mark.parametrize("block", [0, 4, 16])
@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-6), (jnp.bfloat16, 3e-2)])
def test_blocked_attention_matches_xla_attention_with_gradients(block, dtype, atol):
    """Query blocks of 4 (the last one partial), one block (0), and a block longer than the row;
    padding queries get zero cotangent, as the losses give them."""
    q, k, v, cotangent = _operands(dtype)
    mask = segment_mask(jnp.asarray(SEGMENTS))
    ours = jax.jit(lambda q, k, v: causal_blocked_attention(q, k, v, mask, block))
    reference = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, mask=mask[:, None]))
    got = _output_and_grads(ours, q, k, v, cotangent)
    want = _output_and_grads(reference, q, k, v, cotangent)
    real = SEGMENTS > 0  # a padding query sees nothing: its output is arbitrary but finite
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want):
        assert a.dtype == b.dtype == dtype, name
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.isfinite(a).all(), name
        if name in ("output", "dq"):
            a, b = a[real], b[real]
        np.testing.assert_allclose(a, b, atol=atol, err_msg=name)
