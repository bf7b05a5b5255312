"""Continuous batching over the jitted sampler: a plain Python engine, usable without HTTP.

Up to `max_batch` cache rows decode together in chunks of `chunk_steps` tokens (one jitted
`lax.while_loop` per chunk that exits as soon as every row has stopped). Between chunks, finished
rows leave and the queued requests that fit join: their prompts are prefilled together, one
batched call of the sampler's `extend` (`admission.py`), and each prompt's cached row is copied
into free rows of the running batch (n rows for n choices, one prompt row). Nobody waits
for the slowest row of a static batch.

Per request: temperature, top-p, top-k, max_tokens, stop strings, seed and n. The decode chunk
takes sampling settings as per-row arrays, not as the sampler's static `SamplingParams`, so a
client's temperature=0.73 does not compile a new program, and rows of different settings share
one batch. Each choice draws with its own key, folded from (seed, choice, token index), so a
seeded request gives the same text whoever else is in the batch. Greedy rows take the argmax of
the same logits as `Sampler.generate`, so greedy output is token-identical to the sampler run on
the prompt alone (tested).

Prefix reuse: a new prompt sharing at least `min_prefix_tokens` with a cached prompt or finished
conversation prefills only the rest (`prefix_cache.py`).

Weight versions: the engine serves the parameters of one `weight_version`, stamped on every
sampled token (`ChoiceOutput.versions`). `update_weights` swaps both between decode chunks, drops
the prefix-cache entries of older versions and recomputes every live row's cache under the new
weights, so no token is sampled from keys and values of old weights.

A bounded queue: `submit` raises `QueueFullError` when `max_queue` requests are waiting.

Here: the scheduler (admission, weight updates, the decode thread). The rows on the device and
their bookkeeping are in `rows.py`, requests, events and outputs in `requests.py`, the jitted
programs in `decode.py`, the release of text and stop strings in `release.py`.
"""

from __future__ import annotations

import collections
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from flax import nnx

from seetjax.errors import invalid, require
from seetjax.models.tokenizer import Tokenizer
from seetjax.models.transformer import Transformer
from seetjax.sampling.sampler import Sampler
from seetjax.serving.admission import (
    place_requests,
    prefill_in_rows,
    rows_wanted,
    take_fitting,
)
from seetjax.serving.prefix_cache import PrefixCache
from seetjax.serving.release import release
from seetjax.serving.requests import (
    ChoiceOutput,
    ChoiceState,
    EngineStoppedError,
    Event,
    GenerationParams,
    QueueFullError,
    RequestHandle,
    RequestOutput,
    RequestState,
)
from seetjax.serving.rows import RowBatch
from seetjax.serving.telemetry import EngineStats, Histogram, TokenRate

logger = logging.getLogger(__name__)


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
        for name, value, least in (("max_batch", max_batch, 1), ("chunk_steps", chunk_steps, 1),
                                   ("min_prefix_tokens", min_prefix_tokens, 1),
                                   ("max_queue", max_queue, 0),
                                   ("prefix_cache_tokens", prefix_cache_tokens, 0)):
            require(value >= least, self, name, value, f"must be >= {least}")
        if batching not in ("continuous", "static"):
            raise invalid(self, "batching", batching, "one of 'continuous', 'static'")
        self.model, self.tokenizer = model, tokenizer
        self._params = params if params is not None else nnx.state(model)
        self._version = 0
        self._update: tuple[nnx.State, int] | None = None  # waiting for the decode thread
        self.sampler = sampler or Sampler(model, pad_id=tokenizer.pad_id)
        self.max_batch, self.max_queue, self.chunk_steps = max_batch, max_queue, chunk_steps
        self.max_context = min(max_context or model.config.max_position_embeddings,
                               model.config.max_position_embeddings)
        self.batching = batching
        self.stop_ids = list(tokenizer.stop_ids)
        self.stats = EngineStats()
        self.ttft = Histogram()  # seconds from submit to a request's first token
        self.token_rate = TokenRate()
        self.prefixes = PrefixCache(self.sampler, prefix_cache_tokens, min_prefix_tokens)
        self.batch = RowBatch(self.sampler, chunk_steps)
        self._queue: collections.deque[RequestState] = collections.deque()
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
        return self.batch.active

    @property
    def params(self) -> nnx.State:
        """The parameters served (change them with `update_weights`)."""
        return self._params

    @property
    def weight_version(self) -> int:
        """The version of `params` (reported by /metrics)."""
        return self._version

    def compile_count(self) -> int:
        """Programs compiled so far by the sampler, the decode chunk and the row surgery."""
        return sum(self.compile_counts().values())

    def compile_counts(self) -> dict[str, int]:
        """`compile_count` by jitted function (the sampler's prefill and decode, the decode
        chunk, the row surgery of the batch and the prefix cache)."""
        counts = {"sampler": self.sampler.compile_count()}
        for f in (*self.batch.jits, *self.prefixes.jits):
            name = getattr(f, "__name__", repr(f))
            counts[name] = counts.get(name, 0) + f._cache_size()
        return counts

    def update_weights(self, params: nnx.State, version: int) -> None:
        """Serves `params`, of weight `version`, from the next decode chunk on (see the module
        docstring); returns once they serve. From the decode thread itself (an event callback)
        it returns at once and the update lands before the next chunk."""
        with self._lock:
            current = self._update[1] if self._update else self._version
            if version <= current:
                raise invalid(self, "weight_version", version, "must be above the current version "
                              f"{current}")
            self._update = (params, int(version))
            self._lock.notify_all()
            if self._thread is None or not self._thread.is_alive():
                self._apply_update()  # no decode thread: nothing decodes meanwhile
            elif threading.current_thread() is not self._thread:
                while self._update is not None and self.running:
                    self._lock.wait(0.5)

    def reserve(self, sequences: int) -> None:
        """Room for `sequences` conversations in flight at once (a rollout's episodes): as many
        queued requests, as many finished conversations kept for prefix reuse, and the batch
        pinned at as many rows (up to max_batch: `RowBatch.pin`)."""
        with self._lock:
            self.max_queue = max(self.max_queue, int(sequences))
            self.prefixes.keep(sequences)
            self.batch.pin(min(int(sequences), self.max_batch))

    def _apply_update(self) -> None:
        """Swaps in the waiting weights (with the lock held, between chunks)."""
        (self._params, self._version), self._update = self._update, None
        self.prefixes.drop_older(self._version)
        self.batch.recompute(self._params)
        self._lock.notify_all()

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
            self._queue.append(RequestState(handle, seed))
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
                while (not self._stopping and not self._queue and self._update is None
                       and not self.batch.active):
                    self._lock.wait(0.5)
                if self._stopping:
                    return
            start = time.perf_counter()
            try:
                with self._lock:
                    if self._update is not None:
                        self._apply_update()
                self._drop_cancelled()
                self._admit()
                self.batch.shrink()
                if self.batch.active:
                    self._decode_chunk()
            except Exception as e:  # noqa: BLE001 - a device error fails the batch, not the server
                logger.exception("engine: decode failed; failing the active requests")
                self._fail_active(f"{type(e).__name__}: {e}")
            self.stats.busy_s += time.perf_counter() - start

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
        for row, choice in self.batch.live:
            if choice.request.handle.cancelled:
                self.batch.choices[row] = None
                request = choice.request
                if not any(c.request is request for _, c in self.batch.live):
                    self.stats.cancelled += 1
                    request.handle._finish(None, "cancelled")

    def _admit(self) -> None:
        """Moves the queued requests that fit (FIFO) into free rows, prefilled together
        (`admission.py`); a request's n choices copy its one prompt row."""
        if self.batching == "static" and self.batch.active:
            return
        with self._lock:
            requests = take_fitting(self._queue, self.max_batch - self.active_rows)
        if not requests:
            return
        now = time.monotonic()
        for request in requests:
            request.admitted = now
        if self.batch.pinned:  # a rollout's episodes: each prompt in its conversation's row
            in_rows = [r for r in requests if r.handle.params.n == 1]
            requests = [r for r in requests if r.handle.params.n != 1]
            if in_rows:
                self._count_admitted(prefill_in_rows(self.batch, self._params, self._version,
                                                     in_rows, self.prefixes.min_tokens))
        for admitted in place_requests(self.batch, self.prefixes, self._params, self._version,
                                       requests):
            self._count_admitted(admitted)

    def _count_admitted(self, admitted: Sequence[RequestState]) -> None:
        self.stats.prefills += 1
        self.stats.prompt_tokens += sum(len(r.handle.prompt) for r in admitted)
        self.stats.cached_tokens += sum(r.cached_tokens for r in admitted)

    def _decode_chunk(self) -> None:
        self.batch.fit_slots(0)
        with self._lock:
            head = self._queue[0].handle.params.n if self._queue else 0
        wanted = rows_wanted(head, self.active_rows, self.max_batch, len(self.batch.choices),
                             self.batching == "static")
        tokens, logprobs, top_ids, top_lps, count, stopped, position = self.batch.decode(
            self._params, self.stop_ids, wanted)
        self.stats.chunks += 1
        self.stats.row_steps += len(count) * int(count.max(initial=0))  # rows computed
        self.token_rate.record(int(count.sum()))
        now = time.monotonic()
        for row, choice in self.batch.live:
            i = position[row]
            n = int(count[i])
            k = choice.request.handle.params.top_logprobs
            if choice.fsm_state >= 0:
                choice.fsm_state = choice.request.handle.params.constraint.advance(
                    choice.fsm_state, tokens[i, :n].tolist())
            if n and not any(c.tokens for c in choice.request.choices):
                self.ttft.observe(now - choice.request.handle.submitted)
            choice.tokens += tokens[i, :n].tolist()
            choice.logprobs += logprobs[i, :n].tolist()
            choice.versions += [self._version] * n
            choice.tops += [list(zip(top_ids[i, j, :k].tolist(), top_lps[i, j, :k].tolist()))
                            for j in range(n)]
            self.stats.completion_tokens += n
            if stopped[i]:
                choice.finish = "stop"
            elif len(choice.tokens) >= choice.request.handle.params.max_tokens:
                choice.finish = "length"
            release(choice, self.tokenizer)
            if choice.finish is not None:
                self.batch.choices[row] = None
                self._finish_choice(choice, row)

    # ------------------------------------------------------------------ finishing

    def _finish_choice(self, choice: ChoiceState, row: int) -> None:
        request = choice.request
        if self.batch.pinned and len(request.choices) == 1:
            # The conversation stays in its row for the episode's next turn.
            self.batch.park(row, request.handle.prompt + choice.tokens, self._version)
        elif choice.index == 0 and self.prefixes.max_tokens > 0:
            # The whole conversation as cached (prompt + reply): a client's next turn, its
            # tool results appended, reuses all of it.
            cached = request.handle.prompt + choice.tokens
            if len(cached) >= self.prefixes.min_tokens:
                self.prefixes.remember(cached, self.batch.take(row), self._version)
        if all(c.finish is not None for c in request.choices):
            output = RequestOutput(
                request.handle.request_id, len(request.handle.prompt), request.cached_tokens,
                [ChoiceOutput(c.index, c.text, c.tokens, c.logprobs, c.tops, c.finish,
                              c.versions) for c in request.choices])
            self.stats.finished += 1
            seconds = time.monotonic() - request.admitted
            self._request_seconds += 0.2 * (seconds - self._request_seconds)
            request.handle._finish(output)

    def _fail_active(self, message: str) -> None:
        requests = {id(c.request): c.request for _, c in self.batch.live}
        self.batch.clear()
        for request in requests.values():
            request.handle._finish(None, message)

    def _fail_all(self, message: str) -> None:
        with self._lock:
            waiting = list(self._queue)
            self._queue.clear()
        for request in waiting:
            request.handle._finish(None, message)
        self._fail_active(message)

