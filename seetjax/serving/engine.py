"""Continuous batching over the jitted sampler: a plain Python engine, usable without HTTP.

Up to `max_batch` cache rows decode together in chunks of `chunk_steps` tokens (one jitted
`lax.while_loop` per chunk that exits as soon as every row has stopped). Between chunks, finished
rows leave and queued requests join: each new prompt is prefilled on its own with the sampler's
`prefill`/`extend` and its cached row copied into free rows of the running batch (n rows for n
choices, one prefill). Nobody waits for the slowest row of a static batch.

Per request: temperature, top-p, top-k, max_tokens, stop strings, seed and n. The decode chunk
takes sampling settings as per-row arrays, not as the sampler's static `SamplingParams`, so a
client's temperature=0.73 does not compile a new program, and rows of different settings share
one batch. Each choice draws with its own key, folded from (seed, choice, token index), so a
seeded request gives the same text whoever else is in the batch. Greedy rows take the argmax of
the same logits as `Sampler.generate`, so greedy output is token-identical to the sampler run on
the prompt alone (tested).

Prefix reuse: prompts and finished conversations (prompt + reply, as cached) are kept in an LRU
under a token budget; a new prompt sharing at least `min_prefix_tokens` with one of them copies
that cached row and prefills only the rest (exact up to float rounding). A multi-turn client
(tool results appended to the previous reply) so re-encodes only what is new.

A bounded queue: `submit` raises `QueueFullError` when `max_queue` requests are waiting.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.models.tokenizer import Tokenizer
from seetjax.models.transformer import KVCache, Transformer
from seetjax.sampling.next_token import inverse_cdf_sample
from seetjax.sampling.sampler import DecodeState, Sampler, SequenceBatch, bucket

logger = logging.getLogger(__name__)

Array = jax.Array
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs


class QueueFullError(RuntimeError):
    """The engine's queue is full; try again after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class EngineStoppedError(RuntimeError):
    """The engine was stopped (or failed) before the request finished."""


@dataclasses.dataclass(frozen=True)
class GenerationParams:
    """What one request asks for. temperature 0 is greedy; top_k 0 and top_p 1 disable those
    filters; `stop` strings end a choice (not included in its text); `seed` None draws one;
    `ignore_eos` decodes past the stop tokens (fixed-length outputs, for benchmarks)."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    ignore_eos: bool = False  # decode to max_tokens whatever the model says (benchmarks)

    def __post_init__(self):
        # Field-named errors: the HTTP layer validates first, but the engine is also a library.
        checks = [("max_tokens", self.max_tokens >= 1, ">= 1"),
                  ("temperature", self.temperature >= 0, ">= 0"),
                  ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
                  ("top_k", self.top_k >= 0, ">= 0"),
                  ("n", self.n >= 1, ">= 1"),
                  ("top_logprobs", 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS,
                   f"in [0, {MAX_TOP_LOGPROBS}]"),
                  ("stop", all(isinstance(s, str) and s for s in self.stop),
                   "non-empty strings")]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"GenerationParams.{name}={getattr(self, name)!r} must be {rule}")


@dataclasses.dataclass(frozen=True)
class TokenEvent:
    """New output of one choice: released text, the new token ids with their logprobs (under
    softmax(logits / temperature); softmax(logits) when greedy) and top alternatives;
    `finish_reason` ('stop' or 'length') on a choice's last event."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]
    finish_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class ErrorEvent:
    """The request failed (engine stopped or a device error); no more events follow."""

    message: str


@dataclasses.dataclass(frozen=True)
class ChoiceOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str


@dataclasses.dataclass(frozen=True)
class RequestOutput:
    """A finished request: its choices, prompt size and how much of the prompt was reused."""

    request_id: str
    prompt_tokens: int
    cached_tokens: int
    choices: list[ChoiceOutput]

    @property
    def completion_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.choices)


@dataclasses.dataclass(frozen=True)
class RequestDone:
    """The last event of a request that finished: its whole output."""

    output: RequestOutput


Event = TokenEvent | ErrorEvent | RequestDone


class RequestHandle:
    """A submitted request. Events go to `on_event` when one was given (called on the engine's
    thread: keep it short), else into a queue read by `events()` / `result()`."""

    def __init__(self, request_id: str, prompt: Sequence[int], params: GenerationParams,
                 on_event: Callable[[Event], None] | None):
        self.request_id = request_id
        self.prompt = list(prompt)
        self.params = params
        self._on_event = on_event
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._cancelled = threading.Event()
        self._finished = threading.Event()
        self.output: RequestOutput | None = None
        self.error: str | None = None
        self.submitted = time.monotonic()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def cancel(self) -> None:
        """Stops the request: its rows are freed before the next decode chunk."""
        self._cancelled.set()

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Events until the request ends (only without `on_event`)."""
        while True:
            event = self._queue.get(timeout=timeout)
            if event is None:
                return
            yield event

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Blocks until the request is done; raises EngineStoppedError if it failed."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"request {self.request_id} not done after {timeout}s")
        if self.output is None:
            raise EngineStoppedError(self.error or "request cancelled")
        return self.output

    # -- called by the engine thread
    def _emit(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)
        else:
            self._queue.put(event)

    def _finish(self, output: RequestOutput | None, error: str | None = None) -> None:
        self.output, self.error = output, error
        self._finished.set()
        self._emit(RequestDone(output) if output is not None else ErrorEvent(error or "failed"))
        if self._on_event is None:
            self._queue.put(None)


class _Choice:
    """One choice of a request, decoding in one cache row."""

    def __init__(self, request: _Request, index: int, key: np.ndarray):
        self.request, self.index, self.key = request, index, key
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.tops: list[list[tuple[int, float]]] = []
        self.released = ""  # text already handed out
        self.sent_tokens = 0  # tokens already handed out
        self.finish: str | None = None
        self.text = ""

    @property
    def length(self) -> int:
        """Tokens in this row's cache: the prompt and every sampled token."""
        return len(self.request.handle.prompt) + len(self.tokens)


class _Request:
    def __init__(self, handle: RequestHandle, seed: int):
        self.handle, self.seed = handle, seed
        self.choices: list[_Choice] = []  # made on admission, on the engine's thread
        self.cached_tokens = 0
        self.admitted = 0.0

    def make_choices(self) -> None:
        # The keys are device computations: made here, not on the submitting (HTTP) thread.
        self.choices = [_Choice(self, i, _choice_key(self.seed, i))
                        for i in range(self.handle.params.n)]


def _choice_key(seed: int, index: int) -> np.ndarray:
    """The raw key of choice `index` of a request with `seed` (any integer: 64 bits are used)."""
    seed %= 1 << 64
    key = jax.random.fold_in(jax.random.key(seed & 0xFFFFFFFF), seed >> 32)
    return np.asarray(jax.random.key_data(jax.random.fold_in(key, index)), np.uint32)


# ---------------------------------------------------------------------------------------------
# jitted pieces (all take and return the sampler's DecodeState)


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


def _advance(model: Transformer, state: DecodeState, token: Array, live: Array) -> DecodeState:
    """Appends one token per live row (the sampler's decode step: the sampled token enters the
    cache, so the cache always holds every token of the row)."""
    positions = state.cache.lengths[:, None]
    hidden, cache = model.hidden_states(token[:, None], positions, live[:, None].astype(jnp.int32),
                                        state.cache)
    logits = model.logits(hidden[:, 0])
    return DecodeState(cache=cache, logits=jnp.where(live[:, None], logits, state.logits))


def _decode_chunk(graphdef: nnx.GraphDef, params: nnx.State, state: DecodeState, keys: Array,
                  generated: Array, budget: Array, stop_ids: Array, temperature: Array,
                  top_p: Array, top_k: Array, *, num_steps: int, num_top: int, pad_id: int):
    """Up to `num_steps` tokens per row; row b takes at most budget[b] and stops at a stop id."""
    model = nnx.merge(graphdef, params)
    batch = budget.shape[0]

    def cond(carry):
        step, _, done, *_ = carry
        return (step < num_steps) & ~jnp.all(done)

    def body(carry):
        step, state, done, count, stopped, tokens, logprobs, top_ids, top_lps = carry
        # The key of a row's i-th generated token depends on nothing else in the batch.
        step_keys = jax.vmap(lambda k, i: jax.random.key_data(jax.random.fold_in(
            jax.random.wrap_key_data(k), i)))(keys, generated + count)
        token, logprob, tids, tlps = _sample_rows(state.logits, step_keys, temperature, top_p,
                                                  top_k, num_top)
        live = ~done
        token = jnp.where(live, token, pad_id)
        tokens = tokens.at[:, step].set(token)
        logprobs = logprobs.at[:, step].set(jnp.where(live, logprob, 0.0))
        top_ids = top_ids.at[:, step].set(tids)
        top_lps = top_lps.at[:, step].set(tlps)
        count = count + live
        hit_stop = live & jnp.any(token[:, None] == stop_ids, axis=1)
        state = _advance(model, state, token, live)
        done = done | hit_stop | (count >= budget)
        return step + 1, state, done, count, stopped | hit_stop, tokens, logprobs, top_ids, top_lps

    zeros = jnp.zeros((batch,), jnp.int32)
    carry = (jnp.int32(0), state, budget <= 0, zeros, zeros.astype(bool),
             jnp.full((batch, num_steps), pad_id, jnp.int32),
             jnp.zeros((batch, num_steps), jnp.float32),
             jnp.zeros((batch, num_steps, num_top), jnp.int32),
             jnp.zeros((batch, num_steps, num_top), jnp.float32))
    _, state, _, count, stopped, tokens, logprobs, top_ids, top_lps = jax.lax.while_loop(
        cond, body, carry)
    return state, tokens, logprobs, top_ids, top_lps, count, stopped


def _resize_slots(state: DecodeState, slots: int) -> DecodeState:
    """The cache with `slots` slots per row (padded with zeros, or cut: callers only cut slots
    no live row uses)."""
    return state.replace(cache=state.cache.resize(slots))


def _insert_rows(big: DecodeState, small: DecodeState, src: Array, dst: Array) -> DecodeState:
    """big's rows dst[i] = small's rows src[i] (dst out of range: dropped, for padding)."""
    small_cache = small.cache.resize(big.cache.slots)

    def put(b, s):
        return b.at[dst].set(s[src], mode="drop")

    cache = KVCache(keys=tuple(map(put, big.cache.keys, small_cache.keys)),
                    values=tuple(map(put, big.cache.values, small_cache.values)),
                    lengths=big.cache.lengths.at[dst].set(small.cache.lengths[src], mode="drop"))
    return DecodeState(cache=cache, logits=big.logits.at[dst].set(small.logits[src], mode="drop"))


def _take_row(state: DecodeState, row: Array) -> DecodeState:
    return jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, row, 1, axis=0), state)


def _take_rows(state: DecodeState, rows: Array) -> DecodeState:
    return jax.tree.map(lambda x: x[rows], state)


def _pad_rows(state: DecodeState, rows: int) -> DecodeState:
    """`rows` rows: the state's, then empty ones (zero cache, length 0)."""
    return jax.tree.map(lambda x: jnp.pad(x, [(0, rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1)),
                        state)


def _truncate_to(state: DecodeState, length: Array) -> DecodeState:
    """Every row keeps only its first `length` cached tokens (the rest is masked from then on)."""
    return state.replace(cache=state.cache.replace(
        lengths=jnp.minimum(state.cache.lengths, length)))


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class EngineStats:
    """Counters since the engine started."""

    requests: int = 0
    finished: int = 0
    cancelled: int = 0
    rejected: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    chunks: int = 0


class Engine:
    """Continuous-batching generation for one model (see the module docstring).

    `batching="static"` admits requests only when every row is free (a static batch, for
    comparison); `max_batch=1` serves one request at a time. `start()` launches the decode thread
    (or use the engine as a context manager); `submit` may be called from any thread.
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, params: nnx.State | None = None,
                 max_batch: int = 8, max_queue: int = 64, chunk_steps: int = 16,
                 max_context: int | None = None, prefix_cache_tokens: int = 32_768,
                 min_prefix_tokens: int = 16, batching: str = "continuous",
                 sampler: Sampler | None = None):
        if (max_batch < 1 or chunk_steps < 1 or min_prefix_tokens < 1 or max_queue < 0
                or prefix_cache_tokens < 0):
            raise ValueError("Engine: max_batch, chunk_steps and min_prefix_tokens must be >= 1, "
                             "max_queue and prefix_cache_tokens >= 0")
        if batching not in ("continuous", "static"):
            raise ValueError(f"Engine: batching must be 'continuous' or 'static', not {batching!r}")
        self.model, self.tokenizer = model, tokenizer
        self.params = params if params is not None else nnx.state(model)
        self.sampler = sampler or Sampler(model, pad_id=tokenizer.pad_id)
        self.max_batch, self.max_queue, self.chunk_steps = max_batch, max_queue, chunk_steps
        self.max_context = min(max_context or model.config.max_position_embeddings,
                               model.config.max_position_embeddings)
        self.prefix_cache_tokens, self.min_prefix_tokens = prefix_cache_tokens, min_prefix_tokens
        self.batching = batching
        self.stop_ids = list(tokenizer.stop_ids)
        self.stats = EngineStats()

        graphdef = nnx.graphdef(model)
        pad_id = self.sampler.pad_id
        self._decode = jax.jit(functools.partial(_decode_chunk, graphdef, pad_id=pad_id),
                               static_argnames=("num_steps", "num_top"), donate_argnums=(1,))
        # Not donated: a resized cache has another shape, so XLA could not reuse the buffers.
        self._resize = jax.jit(_resize_slots, static_argnums=(1,))
        self._insert = jax.jit(_insert_rows, donate_argnums=(0,))
        self._take_row = jax.jit(_take_row)
        self._take_rows = jax.jit(_take_rows)
        self._pad_rows = jax.jit(_pad_rows, static_argnums=(1,))
        self._truncate = jax.jit(_truncate_to, donate_argnums=(0,))

        # Rows held on device: a power of two that grows as requests join and shrinks as they
        # leave (each decode step computes every held row, live or not).
        self._state = self.sampler.empty(1).state
        self._rows: list[_Choice | None] = [None]
        self._queue: collections.deque[_Request] = collections.deque()
        self._prefixes: collections.OrderedDict[tuple[int, ...], tuple[np.ndarray, SequenceBatch]] = (
            collections.OrderedDict())
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._seeds = random.Random(int.from_bytes(os.urandom(8), "little"))
        self._ids = 0
        self._request_seconds = 0.0  # moving average of a request's time in the batch

    # ------------------------------------------------------------------ public

    def start(self) -> Engine:
        """Starts the decode thread (idempotent)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(target=self._loop, name="seetjax-engine",
                                                daemon=True)
                self._thread.start()
        return self

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stops the decode thread; requests not finished get an ErrorEvent."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._fail_all("the engine stopped")

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    @property
    def active_rows(self) -> int:
        return sum(r is not None for r in self._rows)

    def submit(self, prompt: Sequence[int], params: GenerationParams,
               on_event: Callable[[Event], None] | None = None) -> RequestHandle:
        """Queues a request. Raises ValueError (prompt empty, too long for the context with
        max_tokens, n above max_batch) or QueueFullError (the queue is full)."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) + params.max_tokens > self.max_context:
            raise ValueError(f"the prompt ({len(prompt)} tokens) plus max_tokens "
                             f"({params.max_tokens}) exceeds the context of {self.max_context}")
        if params.n > self.max_batch:
            raise ValueError(f"n={params.n} exceeds the engine's max_batch={self.max_batch}")
        with self._lock:
            if self._stopping or self._thread is None:
                raise EngineStoppedError("the engine is not running")
            if len(self._queue) >= self.max_queue:
                self._purge_queue()  # cancelled requests hold no place
            if len(self._queue) >= self.max_queue:
                self.stats.rejected += 1
                raise QueueFullError(f"the queue is full ({self.max_queue} requests waiting)",
                                     retry_after=self._retry_after())
            self._ids += 1
            handle = RequestHandle(f"req-{self._ids}", prompt, params, on_event)
            seed = params.seed if params.seed is not None else self._seeds.getrandbits(63)
            self._queue.append(_Request(handle, seed))
            self.stats.requests += 1
            self._lock.notify_all()
        return handle

    def generate(self, prompt: Sequence[int], params: GenerationParams,
                 timeout: float | None = None) -> RequestOutput:
        """Submits and waits (a blocking convenience)."""
        return self.submit(prompt, params).result(timeout)

    # ------------------------------------------------------------------ the decode thread

    def _loop(self) -> None:
        while True:
            with self._lock:
                while (not self._stopping and not self._queue
                       and not any(self._rows)):
                    self._lock.wait(0.5)
                if self._stopping:
                    return
            try:
                self._drop_cancelled()
                self._admit()
                self._shrink_rows()
                if any(self._rows):
                    self._decode_chunk()
            except Exception as e:  # noqa: BLE001 - a device error fails the batch, not the server
                logger.exception("engine: decode failed; failing the active requests")
                self._fail_active(f"{type(e).__name__}: {e}")

    def _retry_after(self) -> float:
        """A rough wait before the queue moves: a row frees every (recent time in the batch per
        request) / max_batch; at least a second (Retry-After counts whole seconds)."""
        return max(1.0, self._request_seconds / self.max_batch)

    def _purge_queue(self) -> None:
        """Drops cancelled requests from the queue (with the lock held)."""
        for request in [r for r in self._queue if r.handle.cancelled]:
            self._queue.remove(request)
            self.stats.cancelled += 1
            request.handle._finish(None, "cancelled")

    def _drop_cancelled(self) -> None:
        with self._lock:
            self._purge_queue()
        for row, choice in enumerate(self._rows):
            if choice is not None and choice.request.handle.cancelled:
                self._rows[row] = None
                request = choice.request
                if not any(c.request is request for c in self._rows if c is not None):
                    self.stats.cancelled += 1
                    request.handle._finish(None, "cancelled")

    def _admit(self) -> None:
        """Moves queued requests (FIFO) into free rows: one prefill each, copied to n rows."""
        if self.batching == "static" and any(self._rows):
            return
        while True:
            with self._lock:
                if (not self._queue
                        or self.active_rows + self._queue[0].handle.params.n > self.max_batch):
                    return
                request = self._queue.popleft()
            prompt = request.handle.prompt
            request.admitted = time.monotonic()
            try:
                request.make_choices()
                seqs, reused = self._prefill(prompt)
            except Exception as e:  # noqa: BLE001 - this prompt failed (too big?); not the batch
                logger.exception("engine: prefill of %s failed", request.handle.request_id)
                request.handle._finish(None, f"prefill failed: {type(e).__name__}: {e}")
                continue
            self._grow_rows(self.active_rows + request.handle.params.n)
            free = [i for i, c in enumerate(self._rows) if c is None]
            request.cached_tokens = reused
            self.stats.prompt_tokens += len(prompt)
            self.stats.cached_tokens += reused
            rows = free[:len(request.choices)]
            self._fit_slots(max(len(prompt) + self.chunk_steps, seqs.state.cache.slots))
            k = bucket(len(rows))
            src = np.zeros((k,), np.int32)
            dst = np.full((k,), self._state.logits.shape[0], np.int32)  # out of range: dropped
            dst[:len(rows)] = rows
            try:
                self._state = self._insert(self._state, seqs.state, jnp.asarray(src),
                                           jnp.asarray(dst))
            except Exception as e:  # the batch's buffers may be gone: the loop fails them all
                request.handle._finish(None, f"{type(e).__name__}: {e}")
                raise
            for row, choice in zip(rows, request.choices):
                self._rows[row] = choice

    def _grow_rows(self, needed: int) -> None:
        """Holds at least `needed` rows (new rows empty)."""
        held = len(self._rows)
        if needed <= held:
            return
        rows = bucket(needed)
        self._state = self._pad_rows(self._state, rows)
        self._rows += [None] * (rows - held)

    def _shrink_rows(self) -> None:
        """Moves the live rows to the front of a smaller batch once at most a quarter of the
        held rows are live (the rest would be computed for nothing at every step); half of the
        new batch stays free for newcomers."""
        live = [i for i, c in enumerate(self._rows) if c is not None]
        held = len(self._rows)
        if held == 1 or 4 * len(live) > held:
            return
        rows = max(1, bucket(2 * len(live)))
        index = np.zeros((rows,), np.int32)
        index[:len(live)] = live
        self._state = self._take_rows(self._state, jnp.asarray(index))
        self._rows = [self._rows[i] for i in live] + [None] * (rows - len(live))

    def _prefill(self, prompt: list[int]) -> tuple[SequenceBatch, int]:
        """The prompt's cached row, reusing the longest cached prefix; returns (row, reused)."""
        best, best_key = 0, None
        query = np.asarray(prompt, np.int32)
        for key, (tokens, _) in self._prefixes.items():
            m = min(len(tokens), len(query) - 1)  # at least one token left to compute logits
            if m <= best:
                continue
            same = tokens[:m] == query[:m]
            common = m if same.all() else int(same.argmin())
            if common > best:
                best, best_key = common, key
        if best_key is not None and best >= self.min_prefix_tokens:
            self._prefixes.move_to_end(best_key)
            cached = self._prefixes[best_key][1]
            copy = self.sampler.select(cached, [0])  # extend consumes its input: keep the entry
            copy = SequenceBatch(self._truncate(copy.state, jnp.int32(best)), 1)
            seqs = self.sampler.extend(self.params, copy, [prompt[best:]])
            reused = best
        else:
            seqs = self.sampler.prefill(self.params, [prompt])
            reused = 0
        self._remember(prompt, seqs)
        return seqs, reused

    def _remember(self, tokens: Sequence[int], seqs: SequenceBatch) -> None:
        """Keeps a cached row for prefix reuse (LRU under the token budget)."""
        if self.prefix_cache_tokens <= 0:
            return
        key = tuple(tokens)
        self._prefixes[key] = (np.asarray(tokens, np.int32), seqs)
        self._prefixes.move_to_end(key)
        # An entry that is a prefix of the new one is covered by it.
        for other in [k for k in self._prefixes if k != key and len(k) < len(key)
                      and key[:len(k)] == k]:
            del self._prefixes[other]
        while (sum(e[1].state.cache.slots for e in self._prefixes.values())
               > self.prefix_cache_tokens and len(self._prefixes) > 1):
            self._prefixes.popitem(last=False)

    def _fit_slots(self, needed: int) -> None:
        """Grows the batch's cache to hold `needed` slots per row, or shrinks it when every live
        row fits in half of it (attention runs over all slots)."""
        live = [c.length for c in self._rows if c is not None]
        needed = max([needed] + [n + self.chunk_steps for n in live])
        target = bucket(needed, self.sampler.min_slots)
        slots = self._state.cache.slots
        if target > slots or target * 2 <= slots:
            self._state = self._resize(self._state, target)

    def _decode_chunk(self) -> None:
        rows = len(self._rows)
        self._fit_slots(0)
        padded = self._state.logits.shape[0]
        keys = np.zeros((padded, 2), np.uint32)
        generated = np.zeros((padded,), np.int32)
        budget = np.zeros((padded,), np.int32)
        temperature = np.zeros((padded,), np.float32)
        top_p = np.ones((padded,), np.float32)
        top_k = np.zeros((padded,), np.int32)
        num_top = 0
        for row in range(rows):
            choice = self._rows[row]
            if choice is None:
                continue
            p = choice.request.handle.params
            keys[row] = choice.key
            generated[row] = len(choice.tokens)
            budget[row] = min(self.chunk_steps, p.max_tokens - len(choice.tokens))
            temperature[row], top_p[row], top_k[row] = p.temperature, p.top_p, p.top_k
            num_top = max(num_top, p.top_logprobs)
        stops = np.full((padded, len(self.stop_ids)), -1, np.int32)
        for row, choice in enumerate(self._rows):
            if choice is not None and not choice.request.handle.params.ignore_eos:
                stops[row] = self.stop_ids
        # top_logprobs compiles one variant for all k > 0 (OpenAI's bound), not one per k.
        num_top = MAX_TOP_LOGPROBS if num_top else 0
        self._state, tokens, logprobs, top_ids, top_lps, count, stopped = self._decode(
            self.params, self._state, jnp.asarray(keys), jnp.asarray(generated),
            jnp.asarray(budget), jnp.asarray(stops), jnp.asarray(temperature),
            jnp.asarray(top_p), jnp.asarray(top_k), num_steps=self.chunk_steps, num_top=num_top)
        tokens, logprobs, top_ids, top_lps, count, stopped = jax.device_get(
            (tokens, logprobs, top_ids, top_lps, count, stopped))
        self.stats.chunks += 1
        for row in range(rows):
            choice = self._rows[row]
            if choice is None:
                continue
            n = int(count[row])
            k = choice.request.handle.params.top_logprobs
            choice.tokens += tokens[row, :n].tolist()
            choice.logprobs += logprobs[row, :n].tolist()
            choice.tops += [list(zip(top_ids[row, i, :k].tolist(), top_lps[row, i, :k].tolist()))
                            for i in range(n)]
            self.stats.completion_tokens += n
            if stopped[row]:
                choice.finish = "stop"
            elif len(choice.tokens) >= choice.request.handle.params.max_tokens:
                choice.finish = "length"
            self._release(choice)
            if choice.finish is not None:
                self._rows[row] = None
                self._finish_choice(choice, row)

    # ------------------------------------------------------------------ text and finishing

    def _release(self, choice: _Choice) -> None:
        """Emits the text that is final: the stop token is not text; a stop string ends the
        choice there; text that may be the start of a stop string, or an incomplete UTF-8
        character, waits for the next chunk."""
        params = choice.request.handle.params
        body = choice.tokens[:-1] if choice.finish == "stop" else choice.tokens
        text = self.tokenizer.decode(body)
        keep = len(choice.tokens)
        cut = _find_stop(text, params.stop, max(0, len(choice.released) - _longest(params.stop)))
        if cut is not None:
            text, choice.finish = text[:cut], "stop"
            keep = self._tokens_for(body, cut)
        if choice.finish is None:
            end = len(text) - _held_back(text, params.stop)
            text = text[:max(end, len(choice.released))]
        delta = text[len(choice.released):]
        new = slice(choice.sent_tokens, max(keep, choice.sent_tokens))
        if choice.finish is not None:
            choice.tokens, choice.logprobs = choice.tokens[:keep], choice.logprobs[:keep]
            choice.tops = choice.tops[:keep]
            choice.text = text
        if delta or new.stop > new.start or choice.finish is not None:
            choice.request.handle._emit(TokenEvent(
                choice.index, delta, tuple(choice.tokens[new]), tuple(choice.logprobs[new]),
                tuple(tuple(t) for t in choice.tops[new]), choice.finish))
        choice.released = text
        choice.sent_tokens = max(keep, choice.sent_tokens)

    def _tokens_for(self, ids: list[int], chars: int) -> int:
        """The fewest leading tokens whose text reaches `chars` characters (binary search)."""
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self.tokenizer.decode(ids[:mid])) >= chars:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _finish_choice(self, choice: _Choice, row: int) -> None:
        request = choice.request
        if choice.index == 0 and self.prefix_cache_tokens > 0:
            # The whole conversation as cached (prompt + reply): a client's next turn, its
            # tool results appended, reuses all of it.
            state = self._take_row(self._state, jnp.int32(row))
            cached = request.handle.prompt + choice.tokens
            if len(cached) >= self.min_prefix_tokens:
                self._remember(cached, SequenceBatch(state, 1))
        if all(c.finish is not None for c in request.choices):
            output = RequestOutput(
                request.handle.request_id, len(request.handle.prompt), request.cached_tokens,
                [ChoiceOutput(c.index, c.text, c.tokens, c.logprobs, c.tops, c.finish)
                 for c in request.choices])
            self.stats.finished += 1
            seconds = time.monotonic() - request.admitted
            self._request_seconds += 0.2 * (seconds - self._request_seconds)
            request.handle._finish(output)

    def _fail_active(self, message: str) -> None:
        requests = {id(c.request): c.request for c in self._rows if c is not None}
        self._rows = [None]
        self._state = self.sampler.empty(1).state
        for request in requests.values():
            request.handle._finish(None, message)

    def _fail_all(self, message: str) -> None:
        with self._lock:
            waiting = list(self._queue)
            self._queue.clear()
        for request in waiting:
            request.handle._finish(None, message)
        self._fail_active(message)


def _longest(stop: Sequence[str]) -> int:
    return max((len(s) for s in stop), default=0)


def _find_stop(text: str, stop: Sequence[str], start: int) -> int | None:
    """Where the first stop string begins in text[start:], or None."""
    found = [i for s in stop if (i := text.find(s, start)) >= 0]
    return min(found) if found else None


def _held_back(text: str, stop: Sequence[str]) -> int:
    """How many trailing characters must wait: a partial UTF-8 character (decoded as U+FFFD) or
    a suffix that begins a stop string."""
    hold = len(text) - len(text.rstrip("\ufffd"))
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    return hold
