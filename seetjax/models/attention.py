"""Attention kernels of the transformer, written for XLA:CPU (the fallback where cuDNN's fused
kernel does not run): full-sequence causal attention for training and prefill, and attention of
new tokens over a `KVCache`.

Both take grouped-query operands (Ainslie et al. 2023) without repeating keys or values: queries
are viewed as [batch, kv_heads, group, tokens, head_dim], so each key/value head serves its group.
Scores and softmax statistics are f32 whatever the compute dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

# A large finite negative, not -inf: a query with nothing to attend to (padding) gets a uniform
# distribution instead of NaN.
MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)


def _grouped_queries(q: Array, kv_heads: int) -> Array:
    """Scaled queries [B, T, N, D] -> [B, K, N / K, T, D], each group under its key/value head."""
    b, t, n, d = q.shape
    return (q * d ** -0.5).reshape(b, t, kv_heads, n // kv_heads, d).transpose(0, 2, 3, 1, 4)


def _ungrouped(out: Array) -> Array:
    """[B, K, G, T, D] -> [B, T, K * G, D], the inverse layout of `_grouped_queries`."""
    b, k, g, t, d = out.shape
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, k * g, d)


def _scores(q: Array, k: Array, mask: Array) -> Array:
    """Masked f32 scores of q [B, K, G, T, D] against k [B, K, S, D]; mask [B, 1, 1, T, S]."""
    s = jnp.einsum("bkgtd,bksd->bkgts", q, k, preferred_element_type=jnp.float32)
    return jnp.where(mask, s, MASKED)


@jax.custom_vjp
def _block_attention(q: Array, k: Array, v: Array, mask: Array) -> Array:
    return _block_forward(q, k, v, mask)[0]


def _block_forward(q, k, v, mask):
    s = _scores(q, k, mask)
    top = s.max(-1, keepdims=True)
    e = jnp.exp(s - top)
    total = e.sum(-1, keepdims=True)
    # Normalising the [T, D] output instead of the [T, S] probabilities saves a pass over them.
    out = (jnp.einsum("bkgts,bksd->bkgtd", e.astype(v.dtype), v,
                      preferred_element_type=jnp.float32) / total).astype(q.dtype)
    return out, (q, k, v, mask, out, top, total)


def _block_backward(res, d_out):
    """The softmax-attention backward of FlashAttention-2 (Dao 2023, Alg. 2) over one block:
    probabilities recomputed from the saved row max and normaliser (only [T, 1] statistics are
    kept, not the [T, S] probabilities), dS = P * (dP - rowsum(dO * O))."""
    q, k, v, mask, out, top, total = res
    p = jnp.exp(_scores(q, k, mask) - top) / total
    d_out32 = d_out.astype(jnp.float32)
    dv = jnp.einsum("bkgts,bkgtd->bksd", p, d_out32)
    dp = jnp.einsum("bkgtd,bksd->bkgts", d_out32, v.astype(jnp.float32))
    ds = p * (dp - (d_out32 * out.astype(jnp.float32)).sum(-1, keepdims=True))
    dq = jnp.einsum("bkgts,bksd->bkgtd", ds, k.astype(jnp.float32))
    dk = jnp.einsum("bkgts,bkgtd->bksd", ds, q.astype(jnp.float32))
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_block_attention.defvjp(_block_forward, _block_backward)


def causal_blocked_attention(q: Array, k: Array, v: Array, mask: Array, block: int) -> Array:
    """Attention of q [B, T, N, D] over k, v [B, T, K, D] under a causal mask [B, T, T] (packed
    segments allowed), in query blocks: the block of queries [i, i + block) only sees keys
    [0, i + block), which the causal mask allows anyway, so skipping the rest changes nothing but
    the work. Each block's gradient is the FlashAttention-2 backward (`_block_backward`), which
    on XLA:CPU took ~27% less time than differentiating the softmax (4 x 2,048 rows,
    docs/performance.md). Blocks are static slices: one program; block 0 or >= T is one call."""
    t = q.shape[1]
    q = _grouped_queries(q, k.shape[2])
    k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    mask = mask[:, None, None]
    block = block if 0 < block < t else t
    outs = [_block_attention(q[:, :, :, i:i + block], k[:, :, :i + block], v[:, :, :i + block],
                             mask[..., i:i + block, :i + block]) for i in range(0, t, block)]
    return _ungrouped(outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=3))


def cached_attention(q: Array, k: Array, v: Array, mask: Array) -> Array:
    """Attention of q [B, T, N, D] over cached keys k [B, K, D, S] and values v [B, K, S, D];
    mask [B, T, S]. Heads-major operands with keys stored transposed keep both matmuls free of
    transposes of the cache (see `KVCache`)."""
    groups = _grouped_queries(q, k.shape[1])
    scores = jnp.einsum("bkgtd,bkds->bkgts", groups, k.astype(q.dtype),
                        preferred_element_type=jnp.float32)
    scores = jnp.where(mask[:, None, None], scores, MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return _ungrouped(jnp.einsum("bkgts,bksd->bkgtd", probs, v.astype(q.dtype)))
