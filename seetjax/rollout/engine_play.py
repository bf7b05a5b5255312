"""Episodes played through a continuous-batching engine, no lock step (issue 43, item 1).

`RolloutConfig.mode="engine"`. Each episode is a small state machine: it submits one request per
reply, token-in (its whole conversation: the engine's prefix cache holds its finished
conversation, so only the new observation tokens are prefilled), and as soon as that reply is
back, the rollout's thread pool hands it to the episode (tool execution, hints, SEET's fast
loop) and submits the episode's next request, while the other episodes go on decoding. The engine
refills a row whose reply ended with whichever request is waiting: nobody waits for the longest
reply of a batch, and the environment's time overlaps decoding.

Each request is seeded from the rollout's seed and its episode (the episode's own random stream,
peeked, not drawn from, and the reply's number), so a seeded episode samples the same tokens
whoever else is in the engine. Greedy episodes are the lock-step path's (`SamplerPolicy`) token
for token (tested). The engine side is `seetjax.serving.rollout_policy.EnginePolicy` (the rollout
ranks below the server, so it names only this protocol).
"""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from seetjax.rollout.episode import Episode
from seetjax.rollout.result import PlayTimes
from seetjax.sampling import Completion


@runtime_checkable
class ReplyEngine(Protocol):
    """A generation engine as an engine-driven rollout drives it."""

    seed: int  # the rollout's: each request's seed is drawn from it and its episode

    def reserve(self, sequences: int) -> None:
        """Room for `sequences` conversations at once (queued requests, cached prefixes)."""

    def counters(self) -> tuple[float, int]:
        """(seconds spent prefilling and decoding, decode row-steps) since the engine started."""

    def submit(self, tokens: Sequence[int], max_tokens: int, seed: int,
               done: Callable[[Completion | None, str | None], None]) -> None:
        """Samples one reply of at most `max_tokens` after `tokens`; calls done(completion, None)
        or done(None, error) from the engine's thread."""


class _Busy:
    """Wall seconds during which at least one thread is inside (`with busy:`)."""

    def __init__(self):
        self.seconds, self._inside, self._since = 0.0, 0, 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            if not self._inside:
                self._since = time.perf_counter()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if not self._inside:
                self.seconds += time.perf_counter() - self._since


def request_seed(base: int, k: int) -> int:
    """The seed of an episode's k-th request (its base from `episode_seed`): 63 bits of a hash,
    so no two requests share draws."""
    digest = hashlib.blake2b(f"{base}/{k}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def episode_seed(seed: int, episode: Episode) -> int:
    """An episode's base seed: the rollout's `seed` and the next draw of the episode's own random
    stream, peeked on a copy (the fast loop's draws stay the lock-step path's)."""
    return request_seed(seed, copy.copy(episode.rng).getrandbits(64))


class _Play:
    """One play: the episodes' tokens so far, their request counts, and the count still open."""

    def __init__(self, episodes: Sequence[Episode], engine: ReplyEngine,
                 threads: concurrent.futures.Executor):
        self.episodes, self.engine, self.threads = episodes, engine, threads
        # every token of each conversation so far (the prompt, for an episode not played yet)
        self.tokens = [[t for s in e.conversation.segments for t in s.ids] for e in episodes]
        self.seeds = [episode_seed(engine.seed, e) for e in episodes]
        self.requests = [0] * len(episodes)
        self.reply_tokens = 0
        self.environment = _Busy()
        self.done = threading.Condition()
        self.open = sum(not e.done for e in episodes)
        self.error: str | None = None

    def ask(self, i: int) -> None:
        """Submits episode i's next reply (on any thread)."""
        budget = self.episodes[i].reply_budget()
        seed = request_seed(self.seeds[i], self.requests[i])
        self.requests[i] += 1
        if budget < 1:  # what the sampler gives for no room: an empty cut-off reply
            self.threads.submit(self.answer, i, Completion([], [], "length"))
            return
        self.engine.submit(self.tokens[i], budget, seed,
                           lambda c, error: self.answered(i, c, error))

    def answered(self, i: int, completion: Completion | None, error: str | None) -> None:
        """The engine's callback: the reply goes to the thread pool (the engine's thread only
        schedules)."""
        if not self.failed(error):
            self.threads.submit(self.answer, i, completion)

    def answer(self, i: int, completion: Completion) -> None:
        """Hands the reply to episode i and asks for its next one, or closes it."""
        if self.error is not None:
            return
        try:
            with self.environment:
                nxt = self.episodes[i].reply(completion)
            with self.done:
                self.reply_tokens += len(completion.tokens)
            if nxt is None:
                with self.done:
                    self.open -= 1
                    self.done.notify_all()
                return
            self.tokens[i] += completion.tokens + nxt
            self.ask(i)
        except Exception as e:  # noqa: BLE001 - the engine refused a request: the play fails
            self.refused(i, e)

    def refused(self, i: int, error: Exception) -> None:
        self.failed(f"episode {self.episodes[i].task_id}: {type(error).__name__}: {error}")

    def failed(self, error: str | None) -> bool:
        """Records `error` (the first one is kept); whether the play has failed."""
        if error is not None:
            with self.done:
                self.error = self.error or error
                self.done.notify_all()
        return self.error is not None


def play_on_engine(episodes: Sequence[Episode], engine: ReplyEngine,
                   threads: concurrent.futures.Executor) -> PlayTimes:
    """Plays every episode to its end through `engine` (the module docstring); raises
    RuntimeError, after the episodes in flight stop being advanced, when the engine fails a
    request. Where the time went: sampling and the environment overlap now (`PlayTimes`)."""
    play = _Play(episodes, engine, threads)
    engine.reserve(len(episodes))
    busy, row_steps = engine.counters()
    for i, e in enumerate(episodes):
        if not e.done:  # over_token_cap: never played
            try:
                play.ask(i)
            except Exception as error:  # noqa: BLE001 - raised below, once nothing advances
                play.refused(i, error)
                break
    with play.done:
        while play.open and play.error is None:
            play.done.wait()
        play.error = play.error or ""  # late replies are dropped from here on
    if play.error:
        raise RuntimeError(f"engine-driven rollout failed: {play.error}")
    now_busy, now_steps = engine.counters()
    return PlayTimes(sampling_s=now_busy - busy, environment_s=play.environment.seconds,
                     policy_calls=sum(play.requests), reply_tokens=play.reply_tokens,
                     row_steps=now_steps - row_steps)
