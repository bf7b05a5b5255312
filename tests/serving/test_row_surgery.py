"""The engine's row surgery between decode chunks (`serving/decode.py`), on small states."""

import jax
import jax.numpy as jnp
import numpy as np

from seetjax.models import KVCache, ModelConfig
from seetjax.sampling.sampler import DecodeState
from seetjax.serving.decode import insert_rows

CFG = ModelConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=2, num_heads=2,
                  num_kv_heads=1, head_dim=4)


def _state(rows: int, slots: int, fill: float) -> DecodeState:
    """Every entry distinct: fill + a running count, so a misplaced row shows."""
    cache = KVCache.zeros(CFG, rows, slots)
    count = iter(range(1, 10_000))

    def numbered(x):
        return fill + jnp.arange(x.size, dtype=x.dtype).reshape(x.shape) + next(count) * 1000

    cache = KVCache(keys=tuple(map(numbered, cache.keys)),
                    values=tuple(map(numbered, cache.values)),
                    lengths=jnp.arange(rows, dtype=jnp.int32) + int(fill))
    return DecodeState(cache=cache, logits=numbered(jnp.zeros((rows, CFG.vocab_size))))


def test_insert_rows_copies_the_leading_entries_padded_with_zero_slots():
    """Rows 1 and 0 of an 8-slot state into rows 2 and 0 of a 16-slot batch; the padding
    entries (dst out of range) copy nothing; the other rows keep theirs."""
    big, small = _state(4, 16, 0.5), _state(2, 8, 100_000.0)
    expected = jax.tree.map(np.asarray, big)
    small_np = jax.tree.map(np.asarray, small)
    out = jax.tree.map(np.asarray, jax.jit(insert_rows, donate_argnums=(0,))(
        big, small, jnp.asarray([1, 0, 0, 0]), jnp.asarray([2, 0, 4, 4])))
    for got, want, new, slot_axis in (
            *((g, w, n, 3) for g, w, n in zip(out.cache.keys, expected.cache.keys,
                                             small_np.cache.keys)),
            *((g, w, n, 2) for g, w, n in zip(out.cache.values, expected.cache.values,
                                             small_np.cache.values))):
        for row in (1, 3):
            np.testing.assert_array_equal(got[row], want[row])
        for dst, src in ((2, 1), (0, 0)):
            head = np.take(got[dst], range(8), axis=slot_axis - 1)
            tail = np.take(got[dst], range(8, 16), axis=slot_axis - 1)
            np.testing.assert_array_equal(head, new[src])
            np.testing.assert_array_equal(tail, 0)
    np.testing.assert_array_equal(out.cache.lengths, [100_000, 1, 100_001, 3])
    np.testing.assert_array_equal(out.logits[[0, 2]], small_np.logits[[0, 1]])
    np.testing.assert_array_equal(out.logits[[1, 3]], expected.logits[[1, 3]])


def test_decoding_some_rows_equals_decoding_the_whole_batch_for_them():
    """`decode_rows` over held rows 3 and 0 (padded to 4 with out-of-range entries) of a 4-row,
    64-slot batch, 16-slot window: the same tokens, log-probs and counts as `decode_chunk` over
    all four rows gives those rows, their cached keys and values and lengths written back, and
    rows 1 and 2 left as they were."""
    import functools

    from flax import nnx

    from seetjax.models import Transformer
    from seetjax.sampling.sampler import Sampler
    from seetjax.serving.decode import decode_chunk, decode_rows

    cfg = CFG.replace(vocab_size=32, hidden_size=16, intermediate_size=32, head_dim=8)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    sampler, params, graphdef = Sampler(model, pad_id=0), nnx.state(model), nnx.graphdef(model)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10], [11, 12, 13, 14]]
    state = sampler.extend(params, sampler.empty(4, 64), prompts).state

    def per_row(rows, budget):
        n = len(rows)
        return (jnp.asarray([[7 * r, 7 * r + 1] for r in rows], jnp.uint32),  # a row's own key
                jnp.zeros((n,), jnp.int32), jnp.asarray(budget, jnp.int32),
                jnp.full((n, 1), 31, jnp.int32), jnp.full((n,), 0.8, jnp.float32),
                jnp.ones((n,), jnp.float32), jnp.zeros((n,), jnp.int32), jnp.int32(n + 1))

    static = dict(num_steps=5, num_top=2, window=16, pad_id=0)
    whole = jax.jit(functools.partial(decode_chunk, graphdef, **static))(
        params, state, *per_row([0, 1, 2, 3], [5, 3, 4, 5]))
    before = jax.tree.map(np.asarray, state)
    rows = np.asarray([3, 0, 4, 4], np.int32)  # held rows 3 and 0, then padding
    some = jax.jit(functools.partial(decode_rows, graphdef, **static), donate_argnums=(1,))(
        params, state, jnp.asarray(rows), *per_row([3, 0, 3, 3], [5, 5, 0, 0]))
    for got, want in zip(some[1:], whole[1:]):  # tokens, logprobs, top ids/lps, count, stopped
        np.testing.assert_allclose(np.asarray(got)[:2], np.asarray(want)[[3, 0]], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(some[5])[2:], 0)  # the padding decoded nothing
    after, full = jax.tree.map(np.asarray, some[0]), jax.tree.map(np.asarray, whole[0])
    for got, want, old in zip(after.cache.keys + after.cache.values,
                              full.cache.keys + full.cache.values,
                              before.cache.keys + before.cache.values):
        np.testing.assert_allclose(got[[3, 0]], want[[3, 0]], atol=1e-6)
        np.testing.assert_array_equal(got[[1, 2]], old[[1, 2]])
    np.testing.assert_array_equal(after.cache.lengths, [full.cache.lengths[0], 5, 2,
                                                        full.cache.lengths[3]])
    np.testing.assert_allclose(after.logits[[3, 0]], full.logits[[3, 0]], atol=1e-6)
    np.testing.assert_array_equal(after.logits[[1, 2]], before.logits[[1, 2]])
