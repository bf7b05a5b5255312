"""Task-weighted sampling: an endless stream of examples whose task types follow given weights.

Each task type's examples form their own stream, reshuffled on every pass (grain's `shuffle` then
`repeat`: pass k uses seed + k), and grain's `MapDataset.mix` interleaves the streams
deterministically in proportion to the weights. The mix is stratified rather than drawn at random:
every stretch of the stream holds the types in the weighted proportions, so batches do too (lower
variance than independent draws), and a rare type is revisited in a fresh order each pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.formatter import Example

log = logging.getLogger(__name__)

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
            raise ValueError(f"task_weights: unknown task type {name!r}; one of {TASK_TYPES}")
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"task_weights.{name}={value}: must be a finite number >= 0")
        out[name] = float(value)
    if not any(out.values()):
        raise ValueError(f"task_weights={out}: at least one weight must be > 0")
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


def task_weighted_stream(examples: Sequence[Example], weights: Mapping[str, float], seed: int,
                         to_record: Callable[[Example], Any]) -> grain.MapDataset:
    """An endless MapDataset of `to_record(example)` with task types mixed by `weights` (see the
    module docstring). Deterministic in `seed`."""
    by_type: dict[str, list[Example]] = {t: [] for t in TASK_TYPES}
    for example in examples:
        by_type[example.task_type].append(example)
    mix = effective_weights({t: len(v) for t, v in by_type.items()}, weights)
    streams = [grain.MapDataset.source(by_type[t])
               .shuffle(seed=sub_seed(seed, TASK_TYPES.index(t))).repeat().map(to_record)
               for t in mix]
    if len(streams) == 1:
        return streams[0]
    return grain.MapDataset.mix(streams, list(mix.values()))


def uniform_stream(examples: Sequence[Example], seed: int,
                   to_record: Callable[[Example], Any]) -> grain.MapDataset:
    """An endless MapDataset of `to_record(example)`, epoch after epoch, each epoch reshuffled."""
    if not examples:
        raise ValueError("no examples to sample from")
    return grain.MapDataset.source(list(examples)).shuffle(seed=seed).repeat().map(to_record)
