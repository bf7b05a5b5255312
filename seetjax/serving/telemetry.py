"""What the engine measures: its counters (`EngineStats`) and, for `GET /metrics`, a histogram
(time to first token) and a recent token rate. Thread-safe enough for one writer (the decode
thread) and readers that tolerate a value one update old."""

from __future__ import annotations

import bisect
import collections
import dataclasses
import time

from seetjax.errors import invalid

# Seconds; Prometheus' histogram buckets (upper bounds, +Inf implied).
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """Observations counted per bucket (`le` upper bounds), with their count and sum."""

    def __init__(self, buckets: tuple[float, ...] = TTFT_BUCKETS):
        if list(buckets) != sorted(buckets) or not buckets:
            raise invalid(self, "buckets", buckets, "must be increasing, non-empty")
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last: above every bound
        self.count, self.sum = 0, 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it), +Inf last, as Prometheus exposes buckets."""
        out, total = [], 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts):
            total += n
            out.append((bound, total))
        return out


class TokenRate:
    """Tokens per second over the last `window_s` seconds of decode chunks."""

    def __init__(self, window_s: float = 10.0):
        self.window_s = window_s
        self._chunks: collections.deque[tuple[float, int]] = collections.deque()

    def record(self, tokens: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._chunks.append((now, tokens))
        while self._chunks and self._chunks[0][0] < now - self.window_s:
            self._chunks.popleft()

    def rate(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        recent = [n for t, n in list(self._chunks) if t >= now - self.window_s]
        return sum(recent) / self.window_s


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
    prefills: int = 0  # batched prefill calls admitting requests (several requests each)
    # Decode steps times the rows computed (a chunk decodes its live rows padded to a power of
    # two, or every held row: `RowBatch.decoding`): 1 - completion_tokens / row_steps is
    # decoding's idle share.
    row_steps: int = 0
    busy_s: float = 0.0  # the decode thread's time admitting (prefill) and decoding
