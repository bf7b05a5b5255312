"""Admission: queued requests into the engine's free rows, prefilled together.

Between decode chunks the engine takes every queued request whose choices fit the free rows
(first come, first served: a request that does not fit holds back those behind it) and prefills
their prompts in one batched call of the sampler's `extend` (`PrefixCache.prefill`: each row
from its own cached prefix; a rollout group's identical prompts share one row). The call's
shapes are bucketed as the sampler's are (rows and chunk lengths to powers of two, the cache's
slots to powers of two), so the programs compiled stay few however requests mix. A rollout's
episodes finish their environment turns at about the same time: prefilled one by one, each
paid a call of its own (issue 43's profile).

While a request waits for rows, the decode chunk ends as soon as enough of its rows end for
it to fit (`rows_wanted`), not at the chunk's slowest row.

If the batched prefill fails, each request is prefilled alone, so only a request that fails
alone fails (a prompt too big for the device, say) and the others are admitted.

A batch pinned for a rollout prefills its one-choice requests in its own rows instead
(`prefill_in_rows`): an episode's next prompt in the row where its conversation so far is
parked, computing only its new tokens.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence
from typing import NamedTuple

from flax import nnx

from seetjax.sampling.sampler import SequenceBatch
from seetjax.serving.prefix_cache import PrefixCache
from seetjax.serving.requests import RequestState
from seetjax.serving.rows import RowBatch

logger = logging.getLogger(__name__)


class Prefilled(NamedTuple):
    """Prompt rows ready to copy into the batch: row rows[i] of `seqs` is `requests[i]`'s
    prompt."""

    seqs: SequenceBatch
    rows: list[int]
    requests: list[RequestState]


def take_fitting(queue: collections.deque[RequestState], free: int) -> list[RequestState]:
    """Pops queued requests, in order, while their choices fit `free` rows (lock held)."""
    taken = []
    while queue and queue[0].handle.params.n <= free:
        request = queue.popleft()
        free -= request.handle.params.n
        taken.append(request)
    return taken


def rows_wanted(head: int, active: int, max_batch: int, held: int, static: bool) -> int:
    """How many rows must end for the queue's head (`head` choices; 0: none waiting) to fit
    (it did not at admission): the decode chunk ends early then. None waiting, or a static
    batch: more than the `held` rows, so the chunk runs its steps."""
    if not head or static:
        return held + 1
    return max(1, active + head - max_batch)


def prefill_requests(prefixes: PrefixCache, params: nnx.State, version: int,
                     requests: Sequence[RequestState], slots: int = 0) -> list[Prefilled]:
    """The requests' choices and prompt rows, one batched prefill (module docstring). With
    `slots` (a batch pinned for a rollout: `RowBatch.pin`) the prompts are prefilled in a cache
    of that many slots and not kept for reuse: a rollout's episode never asks its prompt again,
    its next turn extends its finished conversation, which the engine keeps when its reply
    ends. A request that fails alone gets an ErrorEvent and is left out."""
    ready = _with_choices(requests)
    return _prefill(prefixes, params, version, ready, slots) if ready else []


def place_requests(batch: RowBatch, prefixes: PrefixCache, params: nnx.State, version: int,
                   requests: Sequence[RequestState]) -> list[list[RequestState]]:
    """The requests prefilled together (`prefill_requests`, at a pinned batch's slots) and each
    choice's prompt row copied into a free row of `batch`, where it then decodes. Returns the
    requests admitted, a list per batched prefill; if a copy raises, its requests are failed
    and the error raised (the batch's buffers may be gone: the engine fails them all)."""
    placed = []
    for seqs, prompt_rows, admitted in prefill_requests(prefixes, params, version, requests,
                                                         batch.slots_wanted):
        longest = max(len(r.handle.prompt) for r in admitted)
        try:
            batch.place(seqs, [i for i, r in zip(prompt_rows, admitted) for _ in r.choices],
                        [c for r in admitted for c in r.choices], longest + batch.chunk_steps)
        except Exception as e:
            for request in admitted:
                request.handle._finish(None, f"{type(e).__name__}: {e}")
            raise
        placed.append(admitted)
    return placed


def prefill_in_rows(batch: RowBatch, params: nnx.State, version: int,
                    requests: Sequence[RequestState], min_tokens: int) -> list[RequestState]:
    """One-choice requests prefilled in rows of a pinned `batch`, together: each from the
    parked row sharing the longest prefix of its prompt (at least `min_tokens`; the row taken
    over, or copied into a free one: `RowBatch.claim`), else in a free row
    (`RowBatch.prefill`); identical prompts (a rollout group's first turn)
    are prefilled once and the row copied. Their choices then decode there. Returns the
    requests admitted (one whose settings fail gets an ErrorEvent); if the prefill raises,
    they are failed and the error raised (the batch's buffers may be gone)."""
    ready = _with_choices(requests)
    if not ready:
        return []
    first: dict[tuple[int, ...], int] = {}  # a prompt -> its first request
    for i, request in enumerate(ready):
        first.setdefault(tuple(request.handle.prompt), i)
    unique = [ready[i].handle.prompt for i in first.values()]
    claims = dict(zip(first.values(), batch.claim(unique, version, min_tokens)))
    repeats = [i for i in range(len(ready)) if i not in claims]
    rows = [row for row, _ in claims.values()]
    try:
        copies = batch.free_rows(len(repeats), keep=rows)
        batch.prefill(params, rows, [n for _, n in claims.values()], unique)
        if repeats:
            batch.copy([claims[first[tuple(ready[i].handle.prompt)]][0] for i in repeats],
                       copies)
    except Exception as e:
        for request in ready:
            request.handle._finish(None, f"{type(e).__name__}: {e}")
        raise
    claims.update((i, (row, len(ready[i].handle.prompt))) for i, row in zip(repeats, copies))
    for i, request in enumerate(ready):
        row, request.cached_tokens = claims[i]
        batch.choices[row] = request.choices[0]
    return ready


def _with_choices(requests: Sequence[RequestState]) -> list[RequestState]:
    """The requests whose choices could be made; the others get an ErrorEvent."""
    ready = []
    for request in requests:
        try:
            request.make_choices()
        except Exception as e:  # noqa: BLE001 - a setting the dtypes cannot hold: this one fails
            _fail(request, e)
        else:
            ready.append(request)
    return ready


def _fail(request: RequestState, error: Exception) -> None:
    logger.error("engine: admitting %s failed: %s: %s", request.handle.request_id,
                 type(error).__name__, error)
    request.handle._finish(None, f"admission failed: {type(error).__name__}: {error}")


def _prefill(prefixes: PrefixCache, params: nnx.State, version: int,
             requests: list[RequestState], slots: int) -> list[Prefilled]:
    try:
        seqs, rows, reused = prefixes.prefill(params, [r.handle.prompt for r in requests],
                                              version, slots, remember=not slots)
    except Exception as e:  # noqa: BLE001 - retried alone below; a lone failure fails that one
        if len(requests) == 1:
            _fail(requests[0], e)
            return []
        logger.warning("engine: prefilling %d requests together failed (%s: %s); one by one",
                       len(requests), type(e).__name__, e)
        return [p for r in requests for p in _prefill(prefixes, params, version, [r], slots)]
    for request, n in zip(requests, reused):
        request.cached_tokens = n
    return [Prefilled(seqs, rows, list(requests))]
