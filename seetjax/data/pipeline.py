"""The SFT input pipeline on grain: formatted examples -> batches of static shape, resumable.

    pipeline = SFTPipeline(examples, PipelineConfig(seq_len=2048, batch_size=8), replay=buffer.items)
    it = iter(pipeline)
    batch = next(it)               # numpy arrays [batch_size / process_count, seq_len]
    state = it.get_state()         # JSON-able; it.set_state(state) on a fresh iterator resumes
                                   # with exactly the batches that would have come next

Stages, all deterministic in the seed:
1. An endless record stream: task-weighted (`seetjax.data.weighting`), or without weights epoch
   after epoch of uniformly reshuffled examples.
2. Replay: with `replay_ratio` r > 0 and a non-empty buffer, grain's `mix` interleaves the buffer's
   examples (reshuffled each pass) so that a fraction r of the records are replayed ones.
3. A window shuffle (`BlockShuffle` over windows of `shuffle_window` records) breaks the mix's
   fixed interleaving pattern while keeping every window's proportions.
4. Sharding: process p of P reads records p, p + P, ... (a slice of the MapDataset).
5. Rows: first-fit packing (grain `FirstFitPackIterDataset`) of several examples per row, each a
   segment with its own positions; or one example per row, padded (the same packer with one
   sequence per bin).
6. Batches of `batch_size / P` rows.

Batch fields, all [rows, seq_len]: `tokens`, `positions` (within the segment), `segment_ids`
(0 = padding; 1, 2, ... the examples of a row: the model's `attention_mask`), `loss_mask` (f32,
each trained token's weight, 0 elsewhere), `task_ids` (index into TASK_TYPES, -1 on padding) and
`replay` (1 on the tokens of replayed examples).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import grain
import jax
import numpy as np

from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.formatter import Example
from seetjax.data.weighting import (
    DEFAULT_TASK_WEIGHTS,
    BlockShuffle,
    check_weights,
    effective_weights,
    sub_seed,
    task_weighted_stream,
    uniform_stream,
)
from seetjax.errors import invalid

BATCH_FIELDS = ("tokens", "positions", "segment_ids", "loss_mask", "task_ids", "replay")
_PACKED = ("tokens", "loss_mask", "task_ids", "replay")  # per-token record fields
# sub_seed keys of the pipeline's random parts (task streams use 0..3, their TASK_TYPES index)
_NEW, _REPLAY, _WINDOW, _BINS = 10, 11, 12, 13


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """seq_len: tokens per row. batch_size: rows per step over all processes (each process gets
    batch_size / process_count). packing: several examples per row (else one, padded).
    packing_bins: rows first-fit fills before emitting them (0: one batch's rows); more bins
    pack tighter but put examples from further apart in the stream side by side. task_weights:
    sampling weight per task type (None: no weighting, uniform epochs). replay_ratio: fraction
    of records drawn from the replay buffer, when it holds any. shuffle_window: records
    shuffled together after mixing (0: none). prefetch: batches made ahead in a background
    thread (0: none). pad_id: token id of padding."""

    seq_len: int
    batch_size: int
    packing: bool = True
    packing_bins: int = 0
    task_weights: Mapping[str, float] | None = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_TASK_WEIGHTS))
    replay_ratio: float = 0.0
    shuffle_window: int = 256
    prefetch: int = 0
    seed: int = 0
    pad_id: int = 0

    def __post_init__(self):
        for name in ("seq_len", "batch_size"):
            if getattr(self, name) < 1:
                raise invalid(self, name, getattr(self, name), "must be >= 1")
        for name in ("packing_bins", "shuffle_window", "prefetch"):
            if getattr(self, name) < 0:
                raise invalid(self, name, getattr(self, name), "must be >= 0")
        if not 0.0 <= self.replay_ratio < 1.0:
            raise invalid(self, "replay_ratio", self.replay_ratio, "must be in [0, 1)")
        if self.task_weights is not None:
            object.__setattr__(self, "task_weights", check_weights(self.task_weights))


class SFTPipeline:
    """Batches of `examples` (plus replayed ones) for one process; see the module docstring."""

    def __init__(self, examples: Sequence[Example], config: PipelineConfig, *,
                 replay: Sequence[Example] = (), process_index: int | None = None,
                 process_count: int | None = None):
        self.config = config
        self.process_index = jax.process_index() if process_index is None else process_index
        self.process_count = jax.process_count() if process_count is None else process_count
        if config.batch_size % self.process_count:
            raise invalid(config, "batch_size", config.batch_size, "must be a multiple "
                          f"of the process count {self.process_count}")
        if not 0 <= self.process_index < self.process_count:
            raise invalid(self, "process_index", self.process_index,
                          f"must be in [0, {self.process_count})")
        if not examples:
            raise ValueError("SFTPipeline: no examples")
        for example in (*examples, *replay):
            if example.num_tokens > config.seq_len:
                raise ValueError(f"example {example.id!r} has {example.num_tokens} tokens > "
                                 f"seq_len {config.seq_len}; format with max_len <= seq_len")
        self.examples, self.replay = list(examples), list(replay)
        self.rows = config.batch_size // self.process_count
        # The task weights in effect (types without examples left out), or None.
        self.weights: dict[str, float] | None = None
        if config.task_weights is not None:
            counts = dict.fromkeys(TASK_TYPES, 0)
            for e in self.examples:
                counts[e.task_type] += 1
            self.weights = effective_weights(counts, config.task_weights)

    @property
    def replaying(self) -> bool:
        return self.config.replay_ratio > 0 and bool(self.replay)

    def records(self) -> grain.MapDataset:
        """This process's endless stream of example records, before rows are made (stages 1-4)."""
        cfg = self.config
        new = (uniform_stream(self.examples, sub_seed(cfg.seed, _NEW), _record)
               if cfg.task_weights is None else
               task_weighted_stream(self.examples, self.weights, cfg.seed, _record))
        stream = new
        if self.replaying:
            replayed = uniform_stream(self.replay, sub_seed(cfg.seed, _REPLAY), _replayed_record)
            stream = grain.MapDataset.mix([new, replayed], [1.0 - cfg.replay_ratio,
                                                            cfg.replay_ratio])
        if cfg.shuffle_window > 1:
            stream = BlockShuffle(stream, cfg.shuffle_window, sub_seed(cfg.seed, _WINDOW))
        return stream[self.process_index::self.process_count]

    def dataset(self) -> grain.IterDataset:
        """Batches of this process's rows (stages 5 and 6)."""
        cfg = self.config
        records = self.records().to_iter_dataset(grain.ReadOptions(num_threads=0))
        rows = grain.experimental.FirstFitPackIterDataset(
            records, length_struct=dict.fromkeys(_PACKED, cfg.seq_len),
            num_packing_bins=cfg.packing_bins or self.rows, seed=sub_seed(cfg.seed, _BINS),
            padding_struct={"tokens": cfg.pad_id, "loss_mask": 0, "task_ids": -1, "replay": 0},
            max_sequences_per_bin=None if cfg.packing else 1)
        batches = rows.batch(self.rows, drop_remainder=True).map(_batch_fields)
        if cfg.prefetch:
            batches = grain.experimental.ThreadPrefetchIterDataset(
                batches, prefetch_buffer_size=cfg.prefetch)
        return batches

    def __iter__(self) -> grain.DatasetIterator:
        return iter(self.dataset())

    def summary(self) -> dict[str, Any]:
        """What the pipeline samples, for logs."""
        return {"examples": len(self.examples), "replay_examples": len(self.replay),
                "replay_ratio": self.config.replay_ratio if self.replaying else 0.0,
                "task_weights": self.weights, "rows_per_process": self.rows,
                "seq_len": self.config.seq_len, "packing": self.config.packing}


def _record(example: Example, replay: int = 0) -> dict[str, np.ndarray]:
    n = example.num_tokens
    return {"tokens": example.tokens, "loss_mask": example.loss_mask,
            "task_ids": np.full(n, TASK_TYPES.index(example.task_type), np.int32),
            "replay": np.full(n, replay, np.int32)}


def _replayed_record(example: Example) -> dict[str, np.ndarray]:
    return _record(example, replay=1)


def _batch_fields(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"tokens": batch["tokens"], "positions": batch["tokens_positions"],
            "segment_ids": batch["tokens_segment_ids"],
            "loss_mask": batch["loss_mask"].astype(np.float32), "task_ids": batch["task_ids"],
            "replay": batch["replay"]}


def segment_counts(batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Examples in a batch: in all, per task type, and replayed (each segment counted once)."""
    starts = (batch["positions"] == 0) & (batch["segment_ids"] > 0)
    tasks = batch["task_ids"][starts]
    return {"examples": int(starts.sum()), "replayed": int(batch["replay"][starts].sum()),
            "per_task": {t: int((tasks == i).sum()) for i, t in enumerate(TASK_TYPES)}}
