"""Task-weighted sampling: an endless stream of examples whose task types follow given weights.

Each task type's examples form their own stream, reshuffled on every pass (`BlockShuffle`), and
grain's `MapDataset.mix` interleaves the streams deterministically in proportion to the weights.
The mix is stratified rather than drawn at random: every stretch of the stream holds the types in
the weighted proportions, so batches do too (lower variance than independent draws), and a rare
type is revisited in a fresh order each pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import grain
import numpy as np

from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.formatter import Example
from seetjax.errors import invalid

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TASK_WEIGHTS: dict[str, float] = {
    "tool_selection": 0.35, "multi_step_planning": 0.30, "timing_decision": 0.20,
    "tool_retrieval": 0.15}


def sub_seed(seed: int, *keys: int) -> int:
    """A 32-bit seed for one part of a pipeline, independent of the others (numpy SeedSequence)."""
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1)[0])


def check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """The weights as a dict; raises ValueError naming an unknown type or a bad value."""
    out = {}
    for name, value in dict(weights).items():
        if name not in TASK_TYPES:
            raise invalid("task_weights", name, value, f"unknown task type; one of {TASK_TYPES}")
        if not np.isfinite(value) or value < 0:
            raise invalid("task_weights", name, value, "must be a finite number >= 0")
        out[name] = float(value)
    if not any(out.values()):
        raise invalid("PipelineConfig", "task_weights", out, "at least one weight must be > 0")
    return out


def effective_weights(counts: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, float]:
    """The weights actually sampled: types without examples (or weight 0) are left out and the
    rest renormalised to sum to 1. A weighted type without examples is logged, not hidden."""
    weights = check_weights(weights)
    unweighted = [t for t, n in counts.items() if n and not weights.get(t)]
    if unweighted:
        log.warning("task weighting: %s have examples but no weight; they are never sampled",
                    unweighted)
    missing = [t for t, w in weights.items() if w > 0 and not counts.get(t)]
    if missing:
        log.warning("task weighting: no examples of %s; their weight goes to the other types",
                    missing)
    kept = {t: w for t, w in weights.items() if w > 0 and counts.get(t)}
    if not kept:
        raise ValueError(f"task weighting: no examples of any weighted type {sorted(weights)} "
                         f"(examples per type: {dict(counts)})")
    total = sum(kept.values())
    return {t: w / total for t, w in kept.items()}


class BlockShuffle(grain.MapDataset[T]):
    """The parent's elements shuffled within consecutive blocks of `block` elements, block b by
    the permutation drawn from (seed, b). On `source.repeat()` with block = len(source) it is an
    endless stream reshuffled every epoch; on an endless stream it is a window shuffle.

    grain's own shuffles call `index_shuffle` per element, which costs ~1 ms an element on blocks
    of tens (measured); here each block's permutation is drawn once with numpy and cached.
    """

    _CACHED_BLOCKS = 4

    def __init__(self, parent: grain.MapDataset[T], block: int, seed: int):
        super().__init__(parent)
        if block < 1:
            raise invalid(self, "block", block, "must be >= 1")
        self._block, self._seed = block, seed
        self._permutations: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._parent)

    def _permutation(self, block: int) -> np.ndarray:
        with self._lock:
            permutation = self._permutations.get(block)
            if permutation is None:
                size = min(self._block, len(self._parent) - block * self._block)
                permutation = np.random.default_rng([self._seed, block]).permutation(size)
                if len(self._permutations) >= self._CACHED_BLOCKS:
                    self._permutations.pop(next(iter(self._permutations)))
                self._permutations[block] = permutation
            return permutation

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        block, offset = divmod(index, self._block)
        return self._parent[block * self._block + int(self._permutation(block)[offset])]

    def __str__(self) -> str:
        return f"BlockShuffle(block={self._block}, seed={self._seed})"


def task_weighted_stream(examples: Sequence[Example], weights: Mapping[str, float], seed: int,
                         to_record: Callable[[Example], Any]) -> grain.MapDataset:
    """An endless MapDataset of `to_record(example)` with task types mixed by `weights` (see the
    module docstring), e.g. those of `effective_weights`: every weighted type must have examples.
    Deterministic in `seed`."""
    by_type: dict[str, list[Example]] = {t: [] for t in TASK_TYPES}
    for example in examples:
        by_type[example.task_type].append(example)
    mix = {t: w for t, w in check_weights(weights).items() if w > 0}
    empty = [t for t in mix if not by_type[t]]
    if empty:
        raise ValueError(f"task weighting: weighted types {empty} have no examples")
    streams = [uniform_stream(by_type[t], sub_seed(seed, TASK_TYPES.index(t)), to_record)
               for t in mix]
    if len(streams) == 1:
        return streams[0]
    return grain.MapDataset.mix(streams, list(mix.values()))


def uniform_stream(examples: Sequence[Example], seed: int,
                   to_record: Callable[[Example], Any]) -> grain.MapDataset:
    """An endless MapDataset of `to_record(example)`, epoch after epoch, each epoch reshuffled."""
    if not examples:
        raise ValueError("no examples to sample from")
    return BlockShuffle(grain.MapDataset.source(list(examples)).repeat(), len(examples),
                        seed).map(to_record)
