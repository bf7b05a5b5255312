"""The engine's jitted programs, all on the sampler's `DecodeState`: the decode chunk (per-row
sampling settings and keys, so rows of different requests share one program) and the row and slot
surgery between chunks (insert, take, pad, resize, truncate).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from seetjax.models.transformer import Transformer
from seetjax.sampling.next_token import inverse_cdf_sample
from seetjax.sampling.sampler import DecodeState

Array = jax.Array


def _sample_rows(logits: Array, keys: Array, temperature: Array, top_p: Array, top_k: Array,
                 num_top: int) -> tuple[Array, Array, Array, Array]:
    """One token per row with per-row settings. Returns tokens [B], their logprobs [B] (under
    softmax(logits / T), softmax(logits) for greedy rows, as `sample_next_token`) and the top
    `num_top` (ids, logprobs) [B, num_top]."""
    logits = logits.astype(jnp.float32)
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    logprobs = jax.nn.log_softmax(scaled, axis=-1)

    def truncate(x):
        # Per-row top-k and nucleus filters (Holtzman et al. 2020), as `_truncate` in
        # next_token.py with per-row thresholds; the most likely token always survives.
        neg_inf = jnp.finfo(x.dtype).min
        ordered = jnp.sort(x, axis=-1)[:, ::-1]
        kth = jnp.take_along_axis(ordered, jnp.maximum(top_k - 1, 0)[:, None], axis=-1)
        x = jnp.where((top_k[:, None] > 0) & (x < kth), neg_inf, x)
        ordered = jnp.where((top_k[:, None] > 0) & (ordered < kth), neg_inf, ordered)
        probs = jax.nn.softmax(ordered, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        kept = mass_before < top_p[:, None]
        threshold = jnp.min(jnp.where(kept, ordered, jnp.inf), axis=-1, keepdims=True)
        return jnp.where((top_p[:, None] < 1.0) & (x < threshold), neg_inf, x)

    # Sorting the vocabulary every step costs; only batches with a filtered row pay it.
    filtered = jax.lax.cond(jnp.any(~greedy & ((top_p < 1.0) | (top_k > 0))), truncate,
                            lambda x: x, scaled)
    uniforms = jax.vmap(lambda k: jax.random.uniform(jax.random.wrap_key_data(k)))(keys)
    drawn = inverse_cdf_sample(filtered, uniforms)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), drawn).astype(jnp.int32)
    chosen = jnp.take_along_axis(logprobs, tokens[:, None], axis=-1)[:, 0]
    if num_top:
        top_lps, top_ids = jax.lax.top_k(logprobs, num_top)
    else:
        top_lps = jnp.zeros((logits.shape[0], 0), jnp.float32)
        top_ids = jnp.zeros((logits.shape[0], 0), jnp.int32)
    return tokens, chosen, top_ids.astype(jnp.int32), top_lps


def _advance(model: Transformer, state: DecodeState, token: Array, live: Array,
             window: int) -> DecodeState:
    """Appends one token per live row (the sampler's decode step: the sampled token enters the
    cache, so the cache always holds every token of the row); attention reads the first
    `window` slots."""
    positions = state.cache.lengths[:, None]
    hidden, cache = model.hidden_states(token[:, None], positions, live[:, None].astype(jnp.int32),
                                        state.cache, window=window)
    logits = model.logits(hidden[:, 0])
    return DecodeState(cache=cache, logits=jnp.where(live[:, None], logits, state.logits))


def decode_chunk(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, keys: Array,
                  generated: Array, budget: Array, stop_ids: Array, temperature: Array,
                  top_p: Array, top_k: Array, wanted: Array,
                  constraint: tuple[Array, Array] | None = None, *,
                  num_steps: int, num_top: int, window: int, pad_id: int):
    """Up to `num_steps` tokens per row; row b takes at most budget[b] and stops at a stop id.
    Attention reads the cache's first `window` slots: every row decoding must end below it.
    The chunk ends early once `wanted` (a scalar) of the rows decoding have ended: the engine
    asks for that when queued requests wait for rows, so they join without waiting for the
    chunk's slowest row.

    `constraint` (table [S, V'] int32, row states [B] int32), for batches with a constrained row:
    row b in state s >= 0 samples only tokens t with table[s, t] >= 0 and moves to that state
    (`token_fsm.py`); rows in state -1 are not constrained. Without it (None) the program is the
    unconstrained one, unchanged."""
    model = nnx.merge(graphdef, params)
    batch = budget.shape[0]

    def masked(logits: Array, fsm: Array | None) -> Array:
        if fsm is None:
            return logits
        allowed = constraint[0][jnp.maximum(fsm, 0)]  # [B, V'] (V' <= V: the tokenizer's)
        allowed = jnp.pad(allowed, [(0, 0), (0, logits.shape[1] - allowed.shape[1])],
                          constant_values=-1)
        return jnp.where((fsm[:, None] < 0) | (allowed >= 0), logits, -jnp.inf)

    def moved(fsm: Array | None, token: Array, live: Array) -> Array | None:
        if fsm is None:
            return None
        table = constraint[0]
        nxt = table[jnp.maximum(fsm, 0), jnp.minimum(token, table.shape[1] - 1)]
        return jnp.where((fsm >= 0) & live, nxt, fsm)

    idle = budget <= 0  # free and padding rows: done from the start

    def cond(carry):
        step, _, done, *_ = carry
        ended = jnp.sum(done & ~idle)
        return (step < num_steps) & ~jnp.all(done) & (ended < wanted)

    def body(carry):
        step, state, done, count, stopped, tokens, logprobs, top_ids, top_lps, fsm = carry
        # The key of a row's i-th generated token depends on nothing else in the batch.
        step_keys = jax.vmap(lambda k, i: jax.random.key_data(jax.random.fold_in(
            jax.random.wrap_key_data(k), i)))(keys, generated + count)
        token, logprob, tids, tlps = _sample_rows(masked(state.logits, fsm), step_keys,
                                                  temperature, top_p, top_k, num_top)
        live = ~done
        fsm = moved(fsm, token, live)
        token = jnp.where(live, token, pad_id)
        tokens = tokens.at[:, step].set(token)
        logprobs = logprobs.at[:, step].set(jnp.where(live, logprob, 0.0))
        top_ids = top_ids.at[:, step].set(tids)
        top_lps = top_lps.at[:, step].set(tlps)
        count = count + live
        hit_stop = live & jnp.any(token[:, None] == stop_ids, axis=1)
        state = _advance(model, state, token, live, window)
        done = done | hit_stop | (count >= budget)
        return (step + 1, state, done, count, stopped | hit_stop, tokens, logprobs, top_ids,
                top_lps, fsm)

    zeros = jnp.zeros((batch,), jnp.int32)
    carry = (jnp.int32(0), state, idle, zeros, zeros.astype(bool),
             jnp.full((batch, num_steps), pad_id, jnp.int32),
             jnp.zeros((batch, num_steps), jnp.float32),
             jnp.zeros((batch, num_steps, num_top), jnp.int32),
             jnp.zeros((batch, num_steps, num_top), jnp.float32),
             None if constraint is None else constraint[1])
    _, state, _, count, stopped, tokens, logprobs, top_ids, top_lps, _ = jax.lax.while_loop(
        cond, body, carry)
    return state, tokens, logprobs, top_ids, top_lps, count, stopped


def decode_rows(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, rows: Array,
                *args, num_steps: int, num_top: int, window: int, pad_id: int):
    """`decode_chunk` over the held rows `rows` [R] of `state` alone (entries >= the rows held:
    padding, idle), the per-row arguments given for those R rows. Their first `window` slots
    are gathered into a batch of R rows, decoded, and written back in place (`state` donated):
    a step's work follows the rows decoding, not the rows held. On 2 CPU cores a step of the
    embedded base model at 1,024 slots took ~37 ms for 32 rows and ~5.5 ms for 8, and a
    rollout's engine often decodes a few rows of 32 (the others wait for their environment)."""
    small, *out = decode_chunk(graphdef, params, gather_rows(state, rows, slots=window), *args,
                               num_steps=num_steps, num_top=num_top, window=window,
                               pad_id=pad_id)
    return (write_rows(state, small, rows), *out)


def gather_rows(state: DecodeState, rows: Array, lengths: Array | None = None, *,
                slots: int) -> DecodeState:
    """Rows `rows` [R] of `state` (entries out of range: a copy of the last row, as padding) with
    their first `slots` slots; with `lengths` [R], each keeps only that many cached tokens."""
    safe = jnp.minimum(rows, state.logits.shape[0] - 1)
    cache = state.cache
    return DecodeState(
        cache=cache.replace(keys=tuple(k[safe, :, :, :slots] for k in cache.keys),
                            values=tuple(v[safe, :, :slots, :] for v in cache.values),
                            lengths=cache.lengths[safe] if lengths is None else lengths),
        logits=state.logits[safe])


def write_rows(big: DecodeState, small: DecodeState, rows: Array) -> DecodeState:
    """big's row rows[i] = small's row i, for the entries that are rows of big (the others:
    padding), in place (big donated); small's slots overwrite the row's leading slots (those
    past big's are dropped: no row's tokens reach them)."""
    held, slots = big.logits.shape[0], big.cache.slots
    if small.cache.slots > slots:
        small = small.replace(cache=small.cache.resize(slots))

    def put(i, b: DecodeState) -> DecodeState:
        def write(x: Array, piece: Array) -> Array:
            piece = jax.lax.dynamic_slice_in_dim(piece, i, 1, axis=0)
            return jax.lax.dynamic_update_slice(x, piece, (rows[i],) + (0,) * (x.ndim - 1))
        return jax.tree.map(write, b, small)

    # Rows first, padding after (callers' order), so the loop stops at the first padding entry.
    return jax.lax.fori_loop(0, jnp.sum(rows < held), put, big)


def resize_slots(state: DecodeState, slots: int) -> DecodeState:
    """The cache with `slots` slots per row (padded with zeros, or cut: callers only cut slots
    no live row uses)."""
    return state.replace(cache=state.cache.resize(slots))


def insert_rows(big: DecodeState, small: DecodeState, src: Array, dst: Array) -> DecodeState:
    """big's rows dst[i] = small's rows src[i] for the leading entries whose dst is a row of
    big (then padding: dst out of range). One row at a time, in place (big is donated): a
    copy costs the rows copied, not the batch. A scatter of the padded index arrays gathered
    and wrote every held row: 76 ms for one row into 32 rows x 2,048 slots (2-core CPU)."""
    count = jnp.sum(dst < big.logits.shape[0])
    slots = big.cache.slots

    def put(i, b: DecodeState) -> DecodeState:
        row = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, src[i], 1, axis=0), small)
        row = row.replace(cache=row.cache.resize(slots))
        return jax.tree.map(lambda x, r: jax.lax.dynamic_update_slice_in_dim(x, r, dst[i], axis=0),
                            b, row)

    return jax.lax.fori_loop(0, count, put, big)


def take_row(state: DecodeState, row: Array) -> DecodeState:
    return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, row, 1, axis=0), state)


def take_rows(state: DecodeState, rows: Array) -> DecodeState:
    return jax.tree.map(lambda x: x[rows], state)


def pad_rows(state: DecodeState, rows: int) -> DecodeState:
    """`rows` rows: the state's, then empty ones (zero cache, length 0)."""
    return jax.tree.map(lambda x: jnp.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1)),
                        state)


def truncate_to(state: DecodeState, length: Array) -> DecodeState:
    """Every row keeps only its first `length` cached tokens (the rest is masked from then on)."""
    return state.replace(cache=state.cache.replace(
        lengths=jnp.minimum(state.cache.lengths, length)))
