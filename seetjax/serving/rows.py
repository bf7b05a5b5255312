"""The engine's decode batch on the device, row by row: the cache rows (the sampler's
`DecodeState`), the choice each row decodes, and the bookkeeping between decode chunks. Rows grow
as requests join and shrink as they leave, the cache's slots follow the longest row (pinned for a
rollout, both keep to a few shapes: `RowBatch.pin`), prefilled rows are copied in, every row is
recomputed under new weights, and the next chunk's per-row inputs (settings, stop ids, the
constrained rows' automata) are gathered.

A pinned batch keeps each finished conversation in its row ("parked", `park`): a rollout's
episode comes back with that conversation and its tool results appended, and its next prompt is
prefilled in that row, in place (`claim`, `prefill`): no copy of the row out to a prefix cache,
into a prefill batch and back, and no fresh cache allocated per admission.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.sampling.sampler import Sampler, SequenceBatch, bucket, window_for
from seetjax.serving.decode import (
    decode_chunk,
    decode_rows,
    gather_rows,
    insert_rows,
    pad_rows,
    resize_slots,
    take_row,
    take_rows,
    write_rows,
)
from seetjax.serving.prefix_cache import shared_prefix
from seetjax.serving.requests import MAX_TOP_LOGPROBS, ChoiceState
from seetjax.serving.token_fsm import stack_tables


class ChunkInputs(NamedTuple):
    """The per-row arrays of one decode chunk ([rows] each; stops [rows, stop ids]); wanted: the
    rows whose end ends the chunk (a scalar); num_top: how many top log-probs the chunk
    computes (static)."""

    keys: np.ndarray
    generated: np.ndarray
    budget: np.ndarray
    stops: np.ndarray
    temperature: np.ndarray
    top_p: np.ndarray
    top_k: np.ndarray
    wanted: np.ndarray
    num_top: int


class ChunkOutput(NamedTuple):
    """A decode chunk's results on the host: per computed row ([R] or [R, steps, ...]) the tokens,
    log-probs, top ids and log-probs, count decoded and whether it stopped; `positions` maps a
    held row to its entry."""

    tokens: np.ndarray
    logprobs: np.ndarray
    top_ids: np.ndarray
    top_lps: np.ndarray
    count: np.ndarray
    stopped: np.ndarray
    positions: dict[int, int]


class RowBatch:
    """Rows held on device: a power of two that grows as requests join and shrinks as they
    leave (each decode step computes every held row, live or not), within a pin's shapes.
    `choices[row]` is the choice decoding in that row, None for a free row."""

    def __init__(self, sampler: Sampler, chunk_steps: int):
        self.sampler, self.chunk_steps = sampler, chunk_steps
        # Not donated: a resized cache has another shape, so XLA could not reuse the buffers.
        self._resize = jax.jit(resize_slots, static_argnums=(1,))
        self._insert = jax.jit(insert_rows, donate_argnums=(0,))
        self._take_row = jax.jit(take_row)
        self._take_rows = jax.jit(take_rows)
        self._pad_rows = jax.jit(pad_rows, static_argnums=(1,))
        self._gather = jax.jit(gather_rows, static_argnames=("slots",))
        self._write = jax.jit(write_rows, donate_argnums=(0,))
        decode = dict(static_argnames=("num_steps", "num_top", "window"), donate_argnums=(1,))
        self._decode = jax.jit(functools.partial(decode_chunk, sampler.graphdef,
                                                 pad_id=sampler.pad_id), **decode)
        self._decode_rows = jax.jit(functools.partial(decode_rows, sampler.graphdef,
                                                      pad_id=sampler.pad_id), **decode)
        self.jits = (self._decode, self._decode_rows, self._resize, self._insert, self._take_row,
                     self._take_rows, self._pad_rows, self._gather, self._write)
        # The constrained rows' stacked automata on the device: (their ids, offsets, table).
        self._tables: tuple[tuple[int, ...], dict[int, int], jax.Array, list] | None = None
        self.floor, self.pinned = 1, False  # rows held at least, once grown; see `pin`
        self.clear()

    def clear(self) -> None:
        """One free row, nothing cached."""
        self.state = self.sampler.empty(1).state
        self.choices: list[ChoiceState | None] = [None]
        # Parked rows, oldest first: row -> (the tokens cached in it, their weight version).
        self.parked: collections.OrderedDict[int, tuple[np.ndarray, int]] = (
            collections.OrderedDict())

    @property
    def live(self) -> list[tuple[int, ChoiceState]]:
        """(row, choice) of every busy row."""
        return [(i, c) for i, c in enumerate(self.choices) if c is not None]

    @property
    def active(self) -> int:
        return sum(c is not None for c in self.choices)

    def pin(self, rows: int) -> None:
        """From the next growth on, grows to at least `rows` rows (a power of two), never shrinks
        its rows or its cache's slots, and parks finished conversations in their rows (`park`):
        a rollout, whose episodes come and go all the time, then holds one shape (a batch that
        followed its live rows compiled a program per row count, slot count and inserted shape
        it met: 52-69 in a rollout's timed batches after one warm-up, issue 43's profile), and a
        decode chunk computes its live rows alone (`decoding`). Takes effect lazily, on the
        decode thread. Prompts not prefilled in a row are prefilled at the batch's slots
        (`slots_wanted`), so that copying them in compiles per row count only."""
        self.floor, self.pinned = max(self.floor, bucket(rows)), True

    def grow(self, needed: int) -> None:
        """Holds at least `needed` rows (new rows empty), and the pinned floor."""
        held = len(self.choices)
        if needed <= held:
            return
        rows = max(bucket(needed), self.floor)
        self.state = self._pad_rows(self.state, rows)
        self.choices += [None] * (rows - held)

    def shrink(self) -> None:
        """Moves the live rows to the front of a smaller batch once at most a quarter of the
        held rows are live (memory follows the rows held); half of the new batch stays free for
        newcomers. A pinned batch keeps its rows (its parked conversations among them)."""
        live = [i for i, _ in self.live]
        held = len(self.choices)
        if held == 1 or 4 * len(live) > held or self.pinned:
            return
        rows = bucket(2 * len(live))
        index = np.zeros((rows,), np.int32)
        index[:len(live)] = live
        self.state = self._take_rows(self.state, jnp.asarray(index))
        self.choices = [self.choices[i] for i in live] + [None] * (rows - len(live))

    def fit_slots(self, needed: int) -> None:
        """Grows the batch's cache to hold `needed` slots per row, or, unpinned, shrinks it when
        every live row fits in half of it (memory and row copies follow the slots held)."""
        needed = max([needed] + [c.length + self.chunk_steps for _, c in self.live])
        target = bucket(needed, self.sampler.min_slots)
        slots = self.state.cache.slots
        if target > slots or (target * 2 <= slots and not self.pinned):
            self.state = self._resize(self.state, target)

    def window(self) -> int:
        """The slots the next decode chunk's attention reads: the longest live row's tokens and
        a chunk, as a power of two (`window_for`), not every slot a pinned cache holds."""
        longest = max((c.length for _, c in self.live), default=0)
        return window_for(longest, self.chunk_steps, self.state.cache.slots,
                          self.sampler.min_slots)

    @property
    def slots_wanted(self) -> int:
        """The slots a prompt batch should be prefilled with: the batch's own when pinned (one
        shape to copy in), else 0 (as few as the prompts need)."""
        return self.state.cache.slots if self.pinned else 0

    def place(self, seqs: SequenceBatch, src: Sequence[int], choices: Sequence[ChoiceState],
              slots: int) -> None:
        """Copies row src[i] of `seqs` into a free row for `choices[i]` (the batch grown, and its
        cache to at least `slots` slots)."""
        rows = self.free_rows(len(src))
        self.fit_slots(max(slots, seqs.state.cache.slots))
        self.insert(seqs, src, rows)
        for row, choice in zip(rows, choices):
            self.choices[row] = choice

    def free_rows(self, k: int, keep: Sequence[int] = ()) -> list[int]:
        """`k` rows neither live nor parked (nor in `keep`): the batch grown to hold them
        besides the live rows (and `keep`), the oldest parked rows not kept given up where too
        few are free."""
        self.grow(self.active + len(keep) + k)
        free = [i for i, c in enumerate(self.choices)
                if c is None and i not in self.parked and i not in keep]
        evictable = iter([row for row in self.parked if row not in keep])  # oldest first
        while len(free) < k:
            row = next(evictable)
            del self.parked[row]
            free.append(row)
        return free[:k]

    def park(self, row: int, tokens: Sequence[int], version: int) -> None:
        """Keeps the finished conversation `tokens` (all of them cached in `row`, of weight
        `version`) in its row for the episode's next turn (pinned batches)."""
        self.parked[row] = (np.asarray(tokens, np.int32), version)

    def claim(self, prompts: Sequence[Sequence[int]], version: int,
              min_tokens: int) -> list[tuple[int, int]]:
        """(row, tokens of it already cached) for each prompt, from the parked row of `version`
        sharing the longest prefix with it (at least `min_tokens`, one token left to compute).
        A prompt that extends a parked conversation whole takes that row over (an episode's
        next turn: it is no longer parked); one that shares only part of it gets a copy of the
        row in a free one (a retried reply's turn, or another episode's shared system prompt:
        the parked conversation stays for its own episode); the others get a free row
        (`free_rows`) with nothing cached."""
        found: list[tuple[int | None, int, bool]] = []  # (parked row, common prefix, whole)
        for prompt in prompts:
            query, best, best_row = np.asarray(prompt, np.int32), 0, None
            for row, (tokens, tag) in self.parked.items():
                if (min(len(tokens), len(query) - 1) <= best or tag != version
                        or any(row == r and whole for r, _, whole in found)):
                    continue
                common = shared_prefix(tokens, query)
                if common > best:
                    best, best_row = common, row
            if best_row is None or best < min_tokens:
                found.append((None, 0, False))
            else:
                found.append((best_row, best, best == len(self.parked[best_row][0])))
        taken = [row for row, _, whole in found if whole]
        sources = [row for row, _, whole in found if row is not None and not whole]
        for row in taken:
            del self.parked[row]
        free = iter(self.free_rows(sum(not whole for _, _, whole in found),
                                   keep=taken + sources))
        claims, copies = [], ([], [])
        for row, n, whole in found:
            if whole:
                claims.append((row, n))
                continue
            claims.append((next(free), n))
            if row is not None:
                copies[0].append(row)
                copies[1].append(claims[-1][0])
        if copies[0]:
            self.copy(*copies)
        return claims

    def prefill(self, params: nnx.State, rows: Sequence[int], cached: Sequence[int],
                prompts: Sequence[Sequence[int]]) -> None:
        """Row rows[i] holds prompts[i] afterwards: its first cached[i] tokens are kept (they
        are the prompt's) and the rest computed, in one batched `extend` of those rows alone
        (their leading slots gathered, then written back in place)."""
        longest = max(len(p) for p in prompts)
        self.fit_slots(longest + self.chunk_steps)
        k = bucket(len(rows))
        index = np.full((k,), len(self.choices), np.int32)  # out of range: padding
        index[:len(rows)] = rows
        lengths = np.zeros((k,), np.int32)
        lengths[:len(rows)] = cached
        slots = min(self.state.cache.slots, bucket(longest, self.sampler.min_slots))
        small = self._gather(self.state, jnp.asarray(index), jnp.asarray(lengths), slots=slots)
        chunks = [list(p[n:]) for p, n in zip(prompts, cached)] + [[]] * (k - len(rows))
        seqs = self.sampler.extend(params, SequenceBatch(small, k), chunks)
        self.state = self._write(self.state, seqs.state, jnp.asarray(index))

    def copy(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Row dst[i] becomes a copy of row src[i] (a rollout group's identical prompts,
        prefilled once)."""
        k = bucket(len(src))
        index = np.full((2, k), len(self.choices), np.int32)
        index[0, :len(src)], index[1, :len(dst)] = src, dst
        rows = self._gather(self.state, jnp.asarray(index[0]), slots=self.state.cache.slots)
        self.state = self._write(self.state, rows, jnp.asarray(index[1]))

    def insert(self, seqs: SequenceBatch, src: Sequence[int], rows: Sequence[int]) -> None:
        """Copies the cached rows `src[i]` of `seqs` into rows `rows[i]` (the batch's slots must
        hold them: `fit_slots` first). The index arrays span the held rows (padded), so the
        copy compiles once per batch shape, not per number of rows copied."""
        k = self.state.logits.shape[0]
        source = np.zeros((k,), np.int32)
        source[:len(src)] = src
        dst = np.full((k,), self.state.logits.shape[0], np.int32)  # out of range: dropped
        dst[:len(rows)] = rows
        self.state = self._insert(self.state, seqs.state, jnp.asarray(source), jnp.asarray(dst))

    def take(self, row: int) -> SequenceBatch:
        """A copy of one row's cache."""
        return SequenceBatch(self._take_row(self.state, jnp.int32(row)), 1)

    def recompute(self, params: nnx.State) -> None:
        """Every live row's cache recomputed from its tokens (prompt and sampled) under
        `params`: after a weight update no row decodes on from keys and values of the old
        weights."""
        self.parked.clear()  # their keys and values are the old weights'
        live = self.live
        if not live:
            return
        seqs = self.sampler.prefill(params, [c.request.handle.prompt + c.tokens for _, c in live])
        self.fit_slots(seqs.state.cache.slots)
        self.insert(seqs, range(len(live)), [row for row, _ in live])

    def decode(self, params: nnx.State, stop_ids: Sequence[int], wanted: int) -> ChunkOutput:
        """One decode chunk of the live rows (`inputs`; every held row, or the live ones alone
        when they are at most half of them: `decoding`), ending once `wanted` rows end."""
        rows = self.decoding()
        x = self.inputs(stop_ids, wanted, rows)
        args = (*map(jnp.asarray, x[:-1]), self.constraint(rows))
        static = dict(num_steps=self.chunk_steps, num_top=x.num_top, window=self.window())
        if rows is None:
            self.state, *out = self._decode(params, self.state, *args, **static)
        else:
            self.state, *out = self._decode_rows(params, self.state, jnp.asarray(rows), *args,
                                                 **static)
        return ChunkOutput(*jax.device_get(out), self.positions(rows))

    def decoding(self) -> np.ndarray | None:
        """The rows the next chunk decodes, when fewer than the rows held: the live rows, then
        out-of-range padding (the held count) up to a power of two (`decode.decode_rows`);
        None when that power of two is every held row (the whole batch decodes, no copy)."""
        live = [row for row, _ in self.live]
        held = len(self.choices)
        rows = bucket(max(len(live), 1))
        if rows >= held:
            return None
        return np.asarray(live + [held] * (rows - len(live)), np.int32)

    def inputs(self, stop_ids: Sequence[int], wanted: int,
               rows: np.ndarray | None = None) -> ChunkInputs:
        """The next chunk's per-row inputs: each live row's key, tokens so far, budget (at most
        a chunk, within its max_tokens), settings and stop ids (none with ignore_eos); the chunk
        ends once `wanted` rows have ended. Entry i is held row rows[i] (`decoding`), or row i
        without `rows`."""
        position = self.positions(rows)
        padded = self.state.logits.shape[0] if rows is None else len(rows)
        keys = np.zeros((padded, 2), np.uint32)
        generated = np.zeros((padded,), np.int32)
        budget = np.zeros((padded,), np.int32)
        stops = np.full((padded, len(stop_ids)), -1, np.int32)
        temperature = np.zeros((padded,), np.float32)
        top_p = np.ones((padded,), np.float32)
        top_k = np.zeros((padded,), np.int32)
        num_top = 0
        for row, choice in self.live:
            p = choice.request.handle.params
            row = position[row]
            keys[row] = choice.key
            generated[row] = len(choice.tokens)
            budget[row] = min(self.chunk_steps, p.max_tokens - len(choice.tokens))
            temperature[row], top_p[row], top_k[row] = choice.request.settings
            num_top = max(num_top, p.top_logprobs)
            if not p.ignore_eos:
                stops[row] = stop_ids
        # top_logprobs compiles one variant for all k > 0 (OpenAI's bound), not one per k.
        return ChunkInputs(keys, generated, budget, stops, temperature, top_p, top_k,
                           np.int32(wanted), MAX_TOP_LOGPROBS if num_top else 0)

    def positions(self, rows: np.ndarray | None) -> dict[int, int]:
        """Each live row's entry in a chunk's per-row arrays."""
        if rows is None:
            return {row: row for row, _ in self.live}
        return {int(row): i for i, row in enumerate(rows) if row < len(self.choices)}

    def constraint(self, rows: np.ndarray | None = None) -> tuple[jax.Array, jax.Array] | None:
        """The decode chunk's (table, row states) for the constrained rows (entry i: held row
        rows[i], as `inputs`), None when there are none (the unconstrained program runs,
        unchanged). The tables of the rows' automata are stacked (each row's state offset to
        its own), in a power-of-two number of states so few shapes compile; the stacked table
        stays on the device while the same automata decode."""
        fsms = {id(c.request.handle.params.constraint): c.request.handle.params.constraint
                for _, c in self.live if c.fsm_state >= 0}
        if not fsms:
            self._tables = None
            return None
        key = tuple(sorted(fsms))
        if self._tables is None or self._tables[0] != key:
            offsets, table = stack_tables([fsms[k] for k in key])
            # The automata are held with their table: their ids stay theirs while it is cached.
            self._tables = (key, dict(zip(key, offsets)), jnp.asarray(table),
                            list(fsms.values()))
        _, offsets, table, _ = self._tables
        position = self.positions(rows)
        states = np.full((self.state.logits.shape[0] if rows is None else len(rows),), -1,
                         np.int32)
        for row, c in self.live:
            if c.fsm_state >= 0:
                states[position[row]] = (offsets[id(c.request.handle.params.constraint)]
                                         + c.fsm_state)
        return table, jnp.asarray(states)
