"""Jitted batched generation with a KV cache, extendable turn after turn.

Prefill and the decode loop each run inside one `jax.jit`; the decode loop is a `lax.while_loop`
that stops as soon as every row has finished. Shapes are bucketed (rows, chunk length, cache slots
and decode steps to powers of two) and long inputs are prefilled in chunks of at most `max_chunk`
tokens, so a run compiles a handful of times, not once per call, and prefill memory stays bounded.

Multi-turn use keeps a `SequenceBatch` alive: `prefill` the prompts, `generate`, `extend` every row
with its tool observation, `generate` again; the cache always holds every token of each row
(sampled ones included), so nothing is ever re-encoded. Token ids go in and come out exactly.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jax.sharding import Mesh

from seetjax.errors import invalid
from seetjax.models.transformer import KVCache, Transformer
from seetjax.runtime import sharding
from seetjax.sampling.next_token import SamplingParams, sample_next_token

Array = jax.Array


@struct.dataclass
class DecodeState:
    """Device state of a batch of live sequences (rows padded to a bucket)."""

    cache: KVCache  # cache.lengths[b] is also the position of row b's next token
    logits: Array  # [B, V] f32: next-token logits of each row


@dataclasses.dataclass(frozen=True)
class SequenceBatch:
    """Live sequences: the device state plus how many of its rows are real."""

    state: DecodeState
    size: int


@dataclasses.dataclass(frozen=True)
class Completion:
    """One row's generated tokens, the logprob of each, and why it ended ('stop' or 'length');
    `versions`: the policy weight version that sampled each token (empty: an unversioned policy,
    e.g. the bare sampler; `SamplerPolicy` fills it)."""

    tokens: list[int]
    logprobs: list[float]
    finish_reason: str
    versions: list[int] = dataclasses.field(default_factory=list)


def bucket(n: int, minimum: int = 1) -> int:
    """Smallest power of two >= max(n, minimum)."""
    return 1 << (max(n, minimum) - 1).bit_length()


def fine_bucket(n: int, minimum: int = 1) -> int:
    """Smallest 2^k or 3 x 2^(k-2) (k >= 2) that is >= max(n, minimum), for a power-of-two
    `minimum`: sizes at most a third apart, where powers of two waste up to half."""
    power = bucket(n, minimum)
    three_quarters = 3 * power // 4
    return three_quarters if power >= 4 and three_quarters >= max(n, minimum) else power


def window_for(longest: int, new: int, slots: int, minimum: int) -> int:
    """The cache slots attention must read for `new` tokens after a longest row of `longest`:
    a power of two (few programs), at least `minimum`, at most the cache's `slots`
    (`Transformer.hidden_states`'s window)."""
    return min(slots, bucket(longest + new, minimum))


def _advance(model: Transformer, state: DecodeState, tokens: Array, valid: Array,
             window: int = 0) -> DecodeState:
    """Appends tokens [B, T] to every row, the first valid.sum(1) of each row being real;
    the logits follow each row's last new token (rows with none keep theirs). Attention reads
    the cache's first `window` slots (0: all)."""
    count = valid.astype(jnp.int32).sum(axis=1)
    positions = state.cache.lengths[:, None] + jnp.arange(tokens.shape[1])[None, :]
    hidden, cache = model.hidden_states(tokens, positions, valid.astype(jnp.int32), state.cache,
                                        window=window)
    last = jnp.maximum(count - 1, 0)
    logits = model.logits(jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0])
    return DecodeState(cache=cache, logits=jnp.where(count[:, None] > 0, logits, state.logits))


def _prefill(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, tokens: Array,
             valid: Array, *, window: int) -> DecodeState:
    return _advance(nnx.merge(graphdef, params), state, tokens, valid, window)


def _decode(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, rng: Array,
            max_new: Array, stop_ids: Array, *, sampling: SamplingParams, num_steps: int,
            window: int, pad_id: int) -> tuple[DecodeState, Array, Array, Array, Array]:
    model = nnx.merge(graphdef, params)
    batch = max_new.shape[0]

    def cond(carry):
        step, _, _, done, *_ = carry
        return (step < num_steps) & ~jnp.all(done)

    def body(carry):
        step, state, rng, done, count, stopped, tokens, logprobs = carry
        rng, key = jax.random.split(rng)
        token, logprob = sample_next_token(state.logits, key, sampling)
        live = ~done
        token = jnp.where(live, token, pad_id)
        tokens = tokens.at[:, step].set(token)
        logprobs = logprobs.at[:, step].set(jnp.where(live, logprob, 0.0))
        count = count + live
        hit_stop = live & jnp.any(token[:, None] == stop_ids, axis=1)
        # The sampled token enters the cache too, so the next turn extends a complete sequence.
        state = _advance(model, state, token[:, None], live[:, None], window)
        done = done | hit_stop | (count >= max_new)
        return step + 1, state, rng, done, count, stopped | hit_stop, tokens, logprobs

    zeros = jnp.zeros((batch,), jnp.int32)
    carry = (jnp.int32(0), state, rng, max_new <= 0, zeros, zeros.astype(bool),
             jnp.full((batch, num_steps), pad_id, jnp.int32),
             jnp.zeros((batch, num_steps), jnp.float32))
    _, state, _, _, count, stopped, tokens, logprobs = jax.lax.while_loop(cond, body, carry)
    return state, tokens, logprobs, count, stopped


def _take_rows(state: DecodeState, rows: Array) -> DecodeState:
    return jax.tree.map(lambda x: x[rows], state)


_DEFAULT_SAMPLING = SamplingParams()


class Sampler:
    """Batched generation for one model structure.

    Parameters (`nnx.state(model)`) are passed on every call, so a learner's updated arrays are
    used as they are (no copy on a shared mesh). With a `mesh`, rows (cache, logits, inputs) are
    split over its batch axes and the cache's KV heads over its tensor axis. A `SequenceBatch`
    passed to `extend` or `generate` is consumed (its buffers are donated): keep the one returned.

    Prompts enter in chunks of at most `max_chunk` tokens, and fewer where the chunk's attention
    scores (rows x heads x chunk x cache slots, f32) would pass `max_score_bytes`: a greedy
    evaluation of 96 episodes at once (128 rows against 2,048 slots) otherwise held ~2 GB of
    scores per layer, and its process peaked near 10 GB. A chunk's rows are padded to its longest
    piece, rounded up to a power of two or three quarters of one (`fine_bucket`): a turn's
    observations of 20-75 tokens once became a 128-token chunk.
    """

    def __init__(self, model: Transformer, *, pad_id: int, mesh: Mesh | None = None,
                 min_chunk: int = 16, max_chunk: int = 512, min_slots: int = 128,
                 min_steps: int = 16, max_score_bytes: int = 1 << 28):
        if bucket(max_chunk) != max_chunk or bucket(min_chunk) != min_chunk:
            raise invalid(self, "min_chunk, max_chunk", (min_chunk, max_chunk),
                          "must be powers of two")
        if max_score_bytes <= 0:
            raise invalid(self, "max_score_bytes", max_score_bytes, "must be positive")
        graphdef = self.graphdef = nnx.graphdef(model)
        self.pad_id = int(pad_id)
        self.mesh = mesh
        self.min_chunk, self.max_chunk = min_chunk, max_chunk
        self.min_slots, self.min_steps = min_slots, min_steps
        self.max_score_bytes = max_score_bytes
        self._config = model.config
        self._prefill = jax.jit(functools.partial(_prefill, graphdef),
                                static_argnames=("window",), donate_argnums=(1,))
        self._decode = jax.jit(functools.partial(_decode, graphdef, pad_id=self.pad_id),
                               static_argnames=("sampling", "num_steps", "window"),
                               donate_argnums=(1,))
        self._take_rows = jax.jit(_take_rows)

    def compile_count(self) -> int:
        """How many programs the jitted prefill and decode have compiled so far."""
        return self._prefill._cache_size() + self._decode._cache_size()

    def empty(self, size: int, slots: int = 0) -> SequenceBatch:
        """`size` empty sequences with room for `slots` tokens each."""
        rows = self._padded_rows(size)
        cache = KVCache.zeros(self._config, rows, bucket(slots, self.min_slots), self.mesh)
        logits = self._rows_array(np.zeros((rows, self._config.vocab_size), np.float32))
        return SequenceBatch(state=DecodeState(cache=cache, logits=logits), size=size)

    def prefill(self, params: nnx.State, prompts: Sequence[Sequence[int]]) -> SequenceBatch:
        """New sequences from prompt token ids (one list per row)."""
        return self.extend(params, self.empty(len(prompts)), prompts)

    def extend(self, params: nnx.State, seqs: SequenceBatch,
               chunks: Sequence[Sequence[int]]) -> SequenceBatch:
        """Appends `chunks[i]` (possibly empty) to row i without re-encoding what is cached."""
        if len(chunks) != seqs.size:
            raise ValueError(f"extend: {len(chunks)} chunks for {seqs.size} sequences")
        rows = _rows(seqs)
        state = seqs.state
        longest, offset = max((len(c) for c in chunks), default=0), 0
        while offset < longest:
            cached = _longest(state)
            size = self._chunk_size(state, cached)
            pieces = [c[offset:offset + size] for c in chunks]
            offset += size
            length = fine_bucket(max(map(len, pieces)), self.min_chunk)
            tokens = np.full((rows, length), self.pad_id, np.int32)
            valid = np.zeros((rows, length), bool)
            for i, piece in enumerate(pieces):
                tokens[i, :len(piece)] = piece
                valid[i, :len(piece)] = True
            state = self._reserve(state, length, cached)
            state = self._prefill(params, state, self._rows_array(tokens), self._rows_array(valid),
                                  window=self.window(cached, length, state))
        return SequenceBatch(state=state, size=seqs.size)

    def generate(self, params: nnx.State, seqs: SequenceBatch, rng: Array,
                 max_new_tokens: int | Sequence[int],
                 stop_ids: Sequence[int] | Sequence[Sequence[int]],
                 sampling: SamplingParams = _DEFAULT_SAMPLING,
                 ) -> tuple[SequenceBatch, list[Completion]]:
        """Samples up to `max_new_tokens` per row, each row stopping at its first stop token
        (included in its completion). Returns the extended sequences and one Completion per row."""
        rows = _rows(seqs)
        max_new = np.zeros((rows,), np.int32)
        max_new[:seqs.size] = max_new_tokens
        per_row = [list(s) for s in stop_ids] if stop_ids and not isinstance(
            stop_ids[0], (int, np.integer)) else [list(stop_ids)] * seqs.size
        if len(per_row) != seqs.size:
            raise ValueError(f"generate: {len(per_row)} stop-id lists for {seqs.size} sequences")
        stops = np.full((rows, max(1, max(map(len, per_row), default=1))), -1, np.int32)
        for i, s in enumerate(per_row):
            stops[i, :len(s)] = s
        num_steps = bucket(int(max_new.max(initial=0)), self.min_steps)
        longest = _longest(seqs.state)
        state = self._reserve(seqs.state, num_steps, longest)
        state, tokens, logprobs, count, stopped = self._decode(
            params, state, rng, self._rows_array(max_new), self._rows_array(stops),
            sampling=sampling, num_steps=num_steps,
            window=self.window(longest, num_steps, state))
        tokens, logprobs, count, stopped = jax.device_get((tokens, logprobs, count, stopped))
        completions = [Completion(tokens=tokens[i, :count[i]].tolist(),
                                  logprobs=logprobs[i, :count[i]].tolist(),
                                  finish_reason="stop" if stopped[i] else "length")
                       for i in range(seqs.size)]
        return SequenceBatch(state=state, size=seqs.size), completions

    def select(self, seqs: SequenceBatch, rows: Sequence[int]) -> SequenceBatch:
        """Keeps only `rows` (in that order), e.g. to drop finished episodes."""
        if any(not 0 <= r < seqs.size for r in rows):
            raise ValueError(f"select: rows {list(rows)} out of range for {seqs.size} sequences")
        index = np.full((self._padded_rows(len(rows)),), rows[0] if rows else 0, np.int32)
        index[:len(rows)] = rows
        state = self._take_rows(seqs.state, jnp.asarray(index))
        if self.mesh is not None:
            state = jax.device_put(state, self._state_shardings(state))
        return SequenceBatch(state=state, size=len(rows))

    def window(self, longest: int, new: int, state: DecodeState) -> int:
        """The slots attention reads to append `new` tokens after a longest row of `longest`
        (`window_for`): the cache's slots can be more (rows that ended, a pinned engine batch)."""
        return window_for(longest, new, state.cache.slots, self.min_slots)

    def _chunk_size(self, state: DecodeState, cached: int) -> int:
        """The next prompt chunk's length: the largest power of two from `max_chunk` down to
        `min_chunk` whose scores against the slots it reads (its window, after the longest row's
        `cached` tokens) fit `max_score_bytes`."""
        per_slot = state.logits.shape[0] * self._config.num_heads * 4  # f32 per query token
        size = self.max_chunk
        while size > self.min_chunk and per_slot * size * bucket(
                cached + size, self.min_slots) > self.max_score_bytes:
            size //= 2
        return size

    def _padded_rows(self, size: int) -> int:
        """Rows held for `size` sequences: a power of two, a multiple of the batch split."""
        split = sharding.batch_multiple(self.mesh)
        return -(-bucket(size) // split) * split

    def _rows_array(self, x: np.ndarray) -> Array:
        """A [rows, ...] host array on device; split over the batch axes on a mesh."""
        if self.mesh is None:
            return jnp.asarray(x)
        return jax.device_put(x, sharding.named(self.mesh, ("batch",) + (None,) * (x.ndim - 1),
                                                x.shape))

    def _state_shardings(self, state: DecodeState) -> DecodeState:
        def named(axes, x):
            return sharding.named(self.mesh, axes, x.shape)
        cache = state.cache
        return DecodeState(
            cache=KVCache(keys=tuple(named(KVCache.AXES, k) for k in cache.keys),
                          values=tuple(named(KVCache.AXES, v) for v in cache.values),
                          lengths=named(("batch",), cache.lengths)),
            logits=named(("batch", None), state.logits))

    def _reserve(self, state: DecodeState, more: int, longest: int) -> DecodeState:
        """Makes room for writing `more` slots after the longest row (`longest` tokens). The cache
        grows to the next power of two as sequences grow: memory and row copies follow the slots
        held, so slots are kept within 2x of the longest row rather than allocated up front."""
        cache = state.cache
        if longest + more <= cache.slots:
            return state
        state = state.replace(cache=cache.resize(bucket(longest + more, self.min_slots)))
        if self.mesh is not None:
            state = jax.device_put(state, self._state_shardings(state))
        return state


def _rows(seqs: SequenceBatch) -> int:
    return seqs.state.logits.shape[0]


def _longest(state: DecodeState) -> int:
    """Tokens in the longest row's cache (a device sync)."""
    return int(jax.device_get(state.cache.lengths).max())
