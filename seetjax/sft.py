"""Supervised fine-tuning runs: agent dialogs -> coreset -> task-weighted, replayed, packed batches
-> the learner's SFT loss, stage after stage; every checkpoint resumes exactly.

    python launch/sft.py --config=configs/sft.py --workdir=/tmp/sft

A run has one or more continual stages (`config.data.stages`), each with its own dialogs. At the
start of a stage the coreset is chosen with the model as it is then; the stage trains
`config.train.steps` updates on it, mixed with the rehearsal memory's examples at
`config.replay.ratio`; at its end its examples are offered to the memory. A checkpoint holds, as
the learner's caller state (JSON): the stage, the step in it, the pipeline's iterator state, the
stage's coreset ids and the memory's state, so a resumed run sees exactly the batches it would
have seen.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.data.bfcl_dialogs import bfcl_dialogs
from seetjax.data.coreset import CoresetConfig, select_coreset
from seetjax.data.dialogs import Dialog, read_jsonl
from seetjax.data.formatter import Example, format_dialogs
from seetjax.data.pipeline import PipelineConfig, SFTPipeline, segment_counts
from seetjax.data.replay import ReplayBuffer
from seetjax.data.scoring import ModelScorer
from seetjax.learner import create_learner, learner_config
from seetjax.learner.checkpoint import Checkpointer
from seetjax.metrics import MetricsWriter
from seetjax.models.embedded import embedded_model_dir
from seetjax.models.hf import load_hf_checkpoint, save_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer


def say(message: str) -> None:
    if jax.process_index() == 0:
        print(message, flush=True)


def load_dialogs(data: ml_collections.ConfigDict, group: str, split: str | None = None
                 ) -> list[Dialog]:
    """Dialogs of one comma-separated group of BFCL categories or JSONL paths."""
    names = [n.strip() for n in group.split(",") if n.strip()]
    if data.source == "jsonl":
        return [d for path in names for d in read_jsonl(path)]
    if data.source != "bfcl":
        raise ValueError(f"config.data.source={data.source!r}: 'bfcl' or 'jsonl'")
    dialogs, report = bfcl_dialogs(split or data.split, names, prompt_style=data.prompt_style,
                                   call_format=data.call_format or None,
                                   parallel_calls=data.parallel_calls)
    if report.failed:
        say(str(report))
    return dialogs


def stage_groups(data: ml_collections.ConfigDict) -> list[str]:
    default = data.paths if data.source == "jsonl" else data.categories
    groups = [g.strip() for g in (data.stages or default).split(";") if g.strip()]
    if not groups:
        raise ValueError("config.data: no dialogs named (set categories, paths or stages)")
    return groups


def format_all(dialogs: list[Dialog], tokenizer: Tokenizer, data: ml_collections.ConfigDict,
               what: str) -> list[Example]:
    examples, report = format_dialogs(dialogs, tokenizer, data.max_len, data.truncate)
    say(f"{what}: {report}")
    return examples


def pipeline_config(config: ml_collections.ConfigDict, stage: int, pad_id: int) -> PipelineConfig:
    data = config.data
    return PipelineConfig(
        seq_len=data.seq_len, batch_size=data.batch_size, packing=data.packing,
        packing_bins=data.packing_bins, shuffle_window=data.shuffle_window,
        prefetch=data.prefetch, replay_ratio=config.replay.ratio if config.replay.capacity else 0.0,
        task_weights=data.task_weights.to_dict() if data.task_weighting else None,
        seed=config.seed + 1000 * stage, pad_id=pad_id)


def coreset_config(config: ml_collections.ConfigDict, stage: int) -> CoresetConfig:
    c = config.coreset
    return CoresetConfig(strategy=c.strategy, size=c.size, fraction=c.fraction,
                         hybrid_loss_fraction=c.hybrid_loss_fraction, embedding=c.embedding,
                         seed=config.seed + stage)


def run(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> dict[str, float]:
    """Trains (or resumes) the run of `config` in `workdir`; returns the last logged metrics."""
    workdir = Path(workdir)
    path = config.model.path or embedded_model_dir()
    model = load_hf_checkpoint(path, dtype=config.model.dtype,
                               compute_dtype=config.model.compute_dtype)
    tokenizer = Tokenizer.from_pretrained(path)
    learner, state = create_learner(model, learner_config(config.learner.to_dict()),
                                    seed=config.seed)
    checkpoints = Checkpointer(workdir / "checkpoints", keep_last=config.train.keep_checkpoints)
    caller: dict[str, Any] = {}
    if checkpoints.latest_step() is not None:
        state, caller = checkpoints.restore(state)
        say(f"resumed from step {int(state.step)}: stage {caller['stage']}, "
            f"step {caller['stage_step']} of it")

    groups = stage_groups(config.data)
    stages = [format_all(load_dialogs(config.data, g), tokenizer, config.data, f"stage {k} ({g})")
              for k, g in enumerate(groups)]
    evaluation = []
    if config.data.eval_split:
        dialogs = (read_jsonl(config.data.eval_split) if config.data.source == "jsonl" else
                   load_dialogs(config.data, ",".join(groups), config.data.eval_split))
        evaluation = format_all(dialogs, tokenizer, config.data, "evaluation")
    by_id = {e.id: e for examples in stages for e in examples}
    buffer = None
    if config.replay.capacity:
        buffer = (ReplayBuffer.from_state(caller["replay"], by_id) if caller.get("replay") else
                  ReplayBuffer(config.replay.capacity, config.replay.policy, config.seed))

    def scorer() -> ModelScorer:
        return ModelScorer(learner.model(state), batch_size=config.coreset.batch_size)

    metrics: dict[str, float] = {}
    with MetricsWriter(workdir) as writer:
        for k in range(caller.get("stage", 0), len(stages)):
            resuming = caller.get("stage") == k
            if resuming and caller.get("coreset") is not None:
                selected = [by_id[i] for i in caller["coreset"]]
            else:
                coreset = coreset_config(config, k)
                selected, report = select_coreset(stages[k], coreset,
                                                  scorer() if coreset.uses_model else None)
                say(f"stage {k} coreset: {report}")
            pipeline = SFTPipeline(selected, pipeline_config(config, k, tokenizer.pad_id),
                                   replay=buffer.items if buffer else ())
            say(f"stage {k} pipeline: {pipeline.summary()}")
            iterator = iter(pipeline)
            if resuming and caller.get("data") is not None:
                iterator.set_state(caller["data"])
            seen = caller.get("examples_seen", 0) if resuming else 0
            for s in range(caller.get("stage_step", 0) if resuming else 0, config.train.steps):
                batch = next(iterator)
                start = time.perf_counter()
                state, step_metrics = learner.update(state, TrajectoryBatch(sequences=TokenSequences(
                    tokens=batch["tokens"], positions=batch["positions"],
                    segment_ids=batch["segment_ids"], loss_mask=batch["loss_mask"])))
                seen += segment_counts(batch)["examples"] * jax.process_count()
                step = int(state.step)
                if (s + 1) % config.train.log_every == 0 or s + 1 == config.train.steps:
                    metrics = {**step_metrics, **data_metrics(batch, seen, len(selected), k),
                               "step_wall_s": time.perf_counter() - start}
                    writer.write(step, metrics)
                    say(f"step {step}: loss {metrics.get('loss', float('nan')):.4f}, "
                        f"{metrics.get('tokens_per_s', 0):.0f} tokens/s, epoch "
                        f"{metrics['data/epoch']:.2f} of stage {k}")
                if evaluation and config.train.eval_every and step % config.train.eval_every == 0:
                    writer.write(step, {"eval/loss": eval_loss(scorer(), evaluation)})
                last = s + 1 == config.train.steps
                caller = {"stage": k + 1 if last else k, "stage_step": 0 if last else s + 1,
                          "data": None if last else iterator.get_state(),
                          "coreset": None if last else [e.id for e in selected],
                          "examples_seen": 0 if last else seen}
                if last and buffer is not None:
                    buffer.add(selected)
                caller["replay"] = buffer.state_dict() if buffer else None
                if last or step % config.train.checkpoint_every == 0:
                    checkpoints.save(step, state, caller_state=caller)
        if evaluation:
            metrics["eval/loss"] = eval_loss(scorer(), evaluation)
            writer.write(int(state.step), {"eval/loss": metrics["eval/loss"]})
            say(f"evaluation loss {metrics['eval/loss']:.4f} on {len(evaluation)} dialogs")
    checkpoints.wait()
    checkpoints.close()
    if config.train.save_model and jax.process_index() == 0:
        save_hf_checkpoint(learner.model(state), workdir / "model", tokenizer=tokenizer)
    return metrics


def data_metrics(batch: dict[str, np.ndarray], seen: int, size: int, stage: int
                 ) -> dict[str, float]:
    """What one batch holds: replayed share, task-type shares, row fill; epochs of the stage."""
    counts = segment_counts(batch)
    total = max(counts["examples"], 1)
    out = {"data/stage": float(stage), "data/epoch": seen / max(size, 1),
           "data/replayed": counts["replayed"] / total,
           "data/fill": float((batch["segment_ids"] > 0).mean())}
    out.update({f"data/task/{t}": n / total for t, n in counts["per_task"].items()})
    return out


def eval_loss(scorer: ModelScorer, examples: list[Example]) -> float:
    """Mean token loss over `examples`, every trained token weighted alike."""
    scores = scorer(examples)
    weights = np.array([max(e.num_trained - int(e.loss_mask[0]), 1) for e in examples])
    return float((scores.losses * weights).sum() / weights.sum())

