"""Contrastive fine-tuning of a `SentenceEncoder` on (query, gold tool) pairs.

Each step takes B pairs and, for each, `hard_negatives` documents drawn from its BM25-mined
candidates; the loss is `info_nce` over the B positives and B * hard_negatives negatives. The
update is one jitted function of the learner's `TrainState` (optax AdamW with warmup + cosine,
f32 masters) and checkpoints go through the learner's orbax `Checkpointer`.

Resuming is exact: the batch of step s is a pure function of (seed, s) (a permutation per epoch,
a draw of negatives per step), so a run stopped and resumed from a checkpoint takes the same
batches and ends with the same parameters as one that never stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from seetjax.errors import invalid, require
from seetjax.learner.checkpoint import Checkpointer
from seetjax.learner.config import OptimizerConfig
from seetjax.learner.optimizer import make_optimizer
from seetjax.learner.state import TrainState, new_train_state
from seetjax.report.metrics import MetricsWriter
from seetjax.retrieval.corpus import ToolDoc
from seetjax.retrieval.encoder import BertEncoder, embed
from seetjax.retrieval.loss import info_nce
from seetjax.retrieval.retriever import BM25Retriever
from seetjax.retrieval.sentence import SentenceEncoder, pad_batch

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 150
    batch_size: int = 32
    hard_negatives: int = 1  # per pair and step, drawn from its `mined` BM25 candidates
    mined: int = 10
    temperature: float = 0.05  # sentence-transformers' MultipleNegativesRankingLoss scale 20
    symmetric: bool = False
    learning_rate: float = 5e-5
    warmup_steps: int = 15
    weight_decay: float = 0.01
    query_length: int = 96  # tokens; longer queries and docs are cut for training only
    doc_length: int = 128
    seed: int = 0
    checkpoint_every: int = 50
    max_minutes: float = 0.0  # stop (and save) once a step ends past this; 0: no limit
    # Train only the top N layers (0: every layer). The frozen part gets no tangents, so
    # backpropagation stops at the first trained layer: with 2 of 6 layers a step costs ~10
    # layer-passes instead of ~18 (forward 6, backward ~2 per trained layer).
    trainable_layers: int = 0
    # Freeze the embeddings module (word/position/type tables and their LayerNorm): no scatter-add
    # gradient into the 30k-row table, no AdamW state or update for its ~12M parameters, and no
    # input gradient in the first layer. trainable_layers > 0 freezes them anyway.
    freeze_embeddings: bool = False

    def __post_init__(self):
        positive = ("steps", "batch_size", "mined", "query_length", "doc_length",
                    "checkpoint_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise invalid(self, name, getattr(self, name), "must be >= 1")
        if self.batch_size < 2:
            raise invalid(self, "batch_size", self.batch_size, "must be >= 2 (in-batch negatives)")
        if not 0 <= self.hard_negatives <= self.mined:
            raise invalid(self, "hard_negatives", self.hard_negatives,
                          f"must be in [0, mined={self.mined}]")
        for name in ("temperature", "learning_rate"):
            require(getattr(self, name) > 0, self, name, getattr(self, name), "must be > 0")
        if self.trainable_layers < 0:
            raise invalid(self, "trainable_layers", self.trainable_layers, "must be >= 0")
        if not isinstance(self.freeze_embeddings, bool):
            raise invalid(self, "freeze_embeddings", self.freeze_embeddings, "must be a bool")
        require(0 <= self.warmup_steps <= self.steps, self, "warmup_steps", self.warmup_steps,
                f"must be in [0, steps={self.steps}]")
        require(self.max_minutes >= 0, self, "max_minutes", self.max_minutes, "must be >= 0")


@dataclasses.dataclass(frozen=True)
class TrainingPairs:
    """Token arrays of the training pairs and the whole document pool, with doc rows as ints."""

    query_ids: np.ndarray  # [P, Lq] int32, one row per (query, gold doc) pair
    query_mask: np.ndarray
    positive: np.ndarray  # [P] doc row of the pair's gold doc
    candidates: np.ndarray  # [P, mined] doc rows of its BM25 hard-negative candidates
    relevant: tuple[frozenset[int], ...]  # [P] every gold doc row of the pair's query
    doc_ids: np.ndarray  # [N, Ld]
    doc_mask: np.ndarray


def training_pairs(encoder: SentenceEncoder, docs: Sequence[ToolDoc],
                   queries: Sequence[tuple[str, Collection[str]]], cfg: TrainConfig,
                   excluded: Collection[str] = ()) -> TrainingPairs:
    """Pairs of `queries` ((text, gold doc ids), all gold in `docs`), negatives mined by BM25
    among `docs` less their gold and `excluded` (docs of the tools a test holds out)."""
    row = {d.id: i for i, d in enumerate(docs)}
    mined = BM25Retriever(docs).hard_negatives([t for t, _ in queries], [g for _, g in queries],
                                               cfg.mined, excluded)
    texts, positive, candidates, relevant = [], [], [], []
    for (text, gold), negatives in zip(queries, mined):
        for g in sorted(gold):
            texts.append(text)
            positive.append(row[g])
            candidates.append(negatives)
            relevant.append(frozenset(row[x] for x in gold))
    query_ids, query_mask = pad_batch(encoder.token_ids(texts, cfg.query_length), len(texts),
                                      cfg.query_length)
    doc_ids, doc_mask = pad_batch(encoder.token_ids([d.text for d in docs], cfg.doc_length),
                                  len(docs), cfg.doc_length)
    return TrainingPairs(query_ids, query_mask, np.array(positive), np.array(candidates),
                         tuple(relevant), doc_ids, doc_mask)


def batch_at(pairs: TrainingPairs, cfg: TrainConfig, step: int) -> dict[str, np.ndarray]:
    """The batch of `step`: pairs in a per-epoch permutation (remainder dropped), each with
    `hard_negatives` of its candidates; `false_negatives` marks columns relevant to a row."""
    per_epoch = len(pairs.positive) // cfg.batch_size
    epoch, position = divmod(step, per_epoch)
    order = np.random.default_rng([cfg.seed, epoch]).permutation(len(pairs.positive))
    chosen = order[position * cfg.batch_size:(position + 1) * cfg.batch_size]
    rng = np.random.default_rng([cfg.seed, epoch, position, 1])
    picks = np.argsort(rng.random((len(chosen), pairs.candidates.shape[1])),
                       axis=1)[:, :cfg.hard_negatives]
    negatives = np.take_along_axis(pairs.candidates[chosen], picks, axis=1).reshape(-1)
    doc_rows = np.concatenate([pairs.positive[chosen], negatives])
    false_negatives = np.array([[j != i and doc in pairs.relevant[p]
                                 for j, doc in enumerate(doc_rows)]
                                for i, p in enumerate(chosen)])
    return {"query_ids": pairs.query_ids[chosen], "query_mask": pairs.query_mask[chosen],
            "doc_ids": pairs.doc_ids[doc_rows], "doc_mask": pairs.doc_mask[doc_rows],
            "false_negatives": false_negatives}


def optimizer_for(cfg: TrainConfig) -> optax.GradientTransformation:
    return make_optimizer(OptimizerConfig(
        learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.steps - cfg.warmup_steps, weight_decay=cfg.weight_decay))


def trainable_filter(model: BertEncoder, cfg: TrainConfig) -> nnx.filterlib.Filter:
    """The parameters `cfg` trains: those of the top `trainable_layers` layers, else every
    layer's and, unless `freeze_embeddings`, the embeddings'."""
    layers = model.config.num_layers
    if cfg.trainable_layers > layers:
        raise invalid(cfg, "trainable_layers", cfg.trainable_layers,
                      f"the encoder has {layers} layers")
    if cfg.trainable_layers:
        top = range(layers - cfg.trainable_layers, layers)
        return nnx.All(nnx.Param, nnx.Any(*(nnx.PathContains(i) for i in top)))
    if cfg.freeze_embeddings:
        return nnx.All(nnx.Param, nnx.Not(nnx.PathContains("embeddings")))
    return nnx.Param


def split_encoder(model: BertEncoder,
                  cfg: TrainConfig) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """(graphdef, trained parameters, frozen rest)."""
    return nnx.split(model, trainable_filter(model, cfg), ...)


def make_train_step(graphdef: nnx.GraphDef, optimizer: optax.GradientTransformation,
                    cfg: TrainConfig) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
    """The jitted update: InfoNCE loss and gradients of the trained parameters, one optimizer
    step (`graphdef` from `split_encoder`)."""

    def loss_fn(params: nnx.State, frozen: nnx.State, batch: dict[str, jax.Array]):
        model = nnx.merge(graphdef, params, frozen)
        queries = embed(model, batch["query_ids"], batch["query_mask"])
        docs = embed(model, batch["doc_ids"], batch["doc_mask"])
        return info_nce(queries, docs, batch["false_negatives"], cfg.temperature, cfg.symmetric)

    @jax.jit
    def step(state: TrainState, batch: dict[str, jax.Array]) -> tuple[TrainState, dict]:
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params,
                                                                        state.frozen, batch)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        metrics = {**metrics, "grad_norm": optax.tree.norm(grads)}
        return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                             opt_state=opt_state), metrics

    return step


@dataclasses.dataclass(frozen=True)
class TrainResult:
    model: BertEncoder  # the trained encoder
    steps: int  # steps done in total (resumed ones included)
    seconds: float  # wall time of this call's steps
    stopped_early: bool  # by max_minutes


def train(encoder: SentenceEncoder, pairs: TrainingPairs, cfg: TrainConfig,
          workdir: str | os.PathLike, on_step: Callable[[int, dict[str, float]], Any] = None
          ) -> TrainResult:
    """Trains from the last checkpoint under `workdir`/checkpoints (or from `encoder`'s weights)
    up to `cfg.steps`; writes `workdir`/metrics.jsonl and a checkpoint every `checkpoint_every`
    steps and at the end. The encoder's state is left as it was."""
    if len(pairs.positive) < cfg.batch_size:
        raise ValueError(f"train: {len(pairs.positive)} pairs, fewer than batch_size="
                         f"{cfg.batch_size}")
    optimizer = optimizer_for(cfg)
    graphdef, params, frozen = split_encoder(encoder.model, cfg)
    state = new_train_state(params, frozen, optimizer, keep_reference=False, seed=cfg.seed)
    checkpointer = Checkpointer(Path(workdir) / "checkpoints", keep_last=2)
    restored = checkpointer.restore_intact(state)
    if restored is not None:
        state, _, start = restored
        log.info("resumed from step %d", start)
    step_fn = make_train_step(graphdef, optimizer, cfg)
    begin = time.perf_counter()
    step = int(state.step)
    stopped_early = False
    try:
        with MetricsWriter(workdir, tensorboard=False) as writer:
            while step < cfg.steps:
                state, metrics = step_fn(state, batch_at(pairs, cfg, step))
                step += 1
                stopped_early = bool(cfg.max_minutes and
                                     time.perf_counter() - begin > 60 * cfg.max_minutes)
                if step % cfg.checkpoint_every == 0 or step == cfg.steps or stopped_early:
                    checkpointer.save(step, state)
                scalars = {k: float(v) for k, v in metrics.items()}
                writer.write(step, scalars)
                if on_step is not None:
                    on_step(step, scalars)
                if stopped_early:
                    break
    finally:  # an interrupted run still finishes the checkpoint it started
        checkpointer.wait()
        checkpointer.close()
    return TrainResult(nnx.merge(graphdef, state.params, state.frozen), step,
                       time.perf_counter() - begin, stopped_early)
