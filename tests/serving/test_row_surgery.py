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
