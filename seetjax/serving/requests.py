"""A request to the engine (seetjax.serving.engine): what it asks (`GenerationParams`), what comes
back (events, `RequestOutput`, through a `RequestHandle`), and the engine's own record of it while
queued and decoding (`RequestState`, one `ChoiceState` per choice).
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from seetjax.errors import invalid

if TYPE_CHECKING:
    from seetjax.serving.token_fsm import TokenFSM

MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs
MAX_TOP_K = 2**31 - 1  # the decode chunk holds top_k as int32


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
    `ignore_eos` decodes past the stop tokens (fixed-length outputs, for benchmarks);
    `constraint` limits every choice to the token sequences a `TokenFSM` accepts (constrained
    decoding: forced tool calls, JSON schemas)."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    ignore_eos: bool = False  # decode to max_tokens whatever the model says (benchmarks)
    constraint: TokenFSM | None = None

    def __post_init__(self):
        # Field-named errors: the HTTP layer validates first, but the engine is also a library.
        checks = [("max_tokens", self.max_tokens >= 1, ">= 1"),
                  ("temperature", 0 <= self.temperature < math.inf, "finite and >= 0"),
                  ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
                  ("top_k", 0 <= self.top_k <= MAX_TOP_K, f"in [0, {MAX_TOP_K}]"),
                  ("n", self.n >= 1, ">= 1"),
                  ("top_logprobs", 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS,
                   f"in [0, {MAX_TOP_LOGPROBS}]"),
                  ("stop", all(isinstance(s, str) and s for s in self.stop),
                   "non-empty strings")]
        for name, ok, rule in checks:
            if not ok:
                raise invalid(self, name, getattr(self, name), f"must be {rule}")


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
    """versions: the engine's weight version that sampled each token."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str
    versions: list[int] = dataclasses.field(default_factory=list)


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


class ChoiceState:
    """One choice of a request, decoding in one cache row."""

    def __init__(self, request: RequestState, index: int, key: np.ndarray):
        self.request, self.index, self.key = request, index, key
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []  # the weight version of each token
        self.tops: list[list[tuple[int, float]]] = []
        self.released = ""  # text already handed out
        self.sent_tokens = 0  # tokens already handed out
        self.finish: str | None = None
        self.text = ""
        # The choice's state in its request's `constraint` (-1: not constrained).
        self.fsm_state = 0 if request.handle.params.constraint is not None else -1

    @property
    def length(self) -> int:
        """Tokens in this row's cache: the prompt and every sampled token."""
        return len(self.request.handle.prompt) + len(self.tokens)


class RowSettings(NamedTuple):
    """A request's sampling settings in the dtypes of the decode chunk's per-row arrays."""

    temperature: np.float32
    top_p: np.float32
    top_k: np.int32


class RequestState:
    """A submitted request as the engine holds it: its handle, seed, settings and choices."""

    def __init__(self, handle: RequestHandle, seed: int):
        self.handle, self.seed = handle, seed
        self.choices: list[ChoiceState] = []  # made on admission, on the engine's thread
        self.settings: RowSettings | None = None  # made on admission
        self.cached_tokens = 0
        self.admitted = 0.0

    def make_choices(self) -> None:
        """Its choices' keys and its row settings. A value the settings' dtypes cannot hold
        raises here, at admission, failing this request alone, not in the decode chunk that
        every row shares."""
        p = self.handle.params
        self.settings = RowSettings(np.float32(p.temperature), np.float32(p.top_p),
                                    np.int32(p.top_k))
        # The keys are device computations: made here, not on the submitting (HTTP) thread.
        seed = self.seed % (1 << 64)
        keys = np.asarray(_choice_keys(np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32),
                                       np.arange(p.n, dtype=np.uint32)))
        self.choices = [ChoiceState(self, i, keys[i]) for i in range(p.n)]


@jax.jit
def _choice_keys(low: jax.Array, high: jax.Array, index: jax.Array) -> jax.Array:
    """The raw keys of choices `index` [n] of a request whose 64-bit seed is (high, low): one
    program, where op-by-op key arithmetic cost ~40 ms per request on a loaded CPU."""
    key = jax.random.fold_in(jax.random.key(low), high)
    return jax.vmap(lambda i: jax.random.key_data(jax.random.fold_in(key, i)))(index)
