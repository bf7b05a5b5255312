"""Supervised fine-tuning runs: agent dialogs -> coreset -> task-weighted, replayed, packed batches
-> the learner's SFT loss, stage after stage; every checkpoint resumes exactly.

    python launch/sft.py --config=configs/sft.py --workdir=/tmp/sft

A run has one or more continual stages (`config.data.stages`), each with its own dialogs. At the
start of a stage the coreset is chosen with the model as it is then; the stage trains
`config.train.steps` updates on it, mixed with the rehearsal memory's examples at
`config.replay.ratio`; at its end its examples are offered to the memory. A checkpoint holds, as
the learner's caller state (JSON): the stage, the step in it, the pipeline's iterator state, the
stage's coreset ids and the memory's state, so a resumed run sees exactly the batches it would
have seen. Everything left out of the data (unconvertible tasks, dialogs too long) and each
stage's selection are written to `<workdir>/data_report.json`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.data.bfcl_dialogs import bfcl_dialogs
from seetjax.data.coreset import select_coreset
from seetjax.data.dialogs import Dialog, listing, read_jsonl
from seetjax.data.formatter import Example, format_dialogs
from seetjax.data.pipeline import SFTPipeline, segment_counts
from seetjax.data.qa_dialogs import TEAM_SOURCE, oracle_dialogs
from seetjax.data.replay import ReplayBuffer
from seetjax.data.scoring import ModelScorer
from seetjax.data.single_turn_dialogs import SingleTurnReport, single_turn_dialogs
from seetjax.envs.qa_search.run import NAME as QA_SOURCE
from seetjax.envs.task_source import source_of
from seetjax.errors import invalid
from seetjax.learner import create_learner, learner_config
from seetjax.learner.checkpoint import Checkpointer
from seetjax.models.copy_circuit import copy_batch_rows, held_columns, install_copy_circuit
from seetjax.models.hf import (
    load_hf_checkpoint,
    load_options,
    save_hf_checkpoint,
    save_lora_adapter,
)
from seetjax.models.lora import has_lora
from seetjax.models.tokenizer import Tokenizer
from seetjax.report.console import say
from seetjax.report.metrics import MetricsWriter
from seetjax.runtime.workdir import WorkdirLock, workdir_path
from seetjax.sft.config import (
    copy_rows,
    coreset_config,
    env_config,
    pipeline_config,
    qa_section,
    single_turn_categories,
    stage_groups,
    team_config,
    validate,
)


def load_dialogs(data: ml_collections.ConfigDict, group: str, split: str | None = None
                 ) -> tuple[list[Dialog], dict[str, str]]:
    """Dialogs of one group, and the BFCL tasks that could not be converted (with the reason).
    `split`: a BFCL split other than `data.split`, or for JSONL data a file instead of `group`.
    qa_search: the oracle dialogs of the split's first `tasks_per_category` questions; qa_team:
    the oracle team's (a coordinator's and its workers' dialogs per question)."""
    if data.source in (QA_SOURCE, TEAM_SOURCE):
        max_rounds = team_config(data).max_rounds if data.source == TEAM_SOURCE else None
        dialogs, failed = oracle_dialogs(qa_section(data), split or data.split,
                                         data.tasks_per_category or None, max_rounds)
        if failed:
            say(f"{data.source}: {len(failed)} questions left out" + listing(failed))
        return dialogs, failed
    if data.source == "jsonl":
        names = [split] if split else group.split(",")
        return [d for path in names if path.strip() for d in read_jsonl(path.strip())], {}
    categories = [c.strip() for c in group.split(",") if c.strip()]
    tasks = source_of(data).load(split or data.split, categories,
                                 data.tasks_per_category or None)
    dialogs, report = bfcl_dialogs(tasks=tasks, prompt_style=data.prompt_style,
                                   call_format=data.call_format or None,
                                   parallel_calls=data.parallel_calls,
                                   compact_description_chars=data.compact_description_chars)
    if report.failed:
        say(f"{group}: {report}")
    return dialogs, report.failed


def load_single_turn(config: ml_collections.ConfigDict
                     ) -> tuple[list[Dialog], SingleTurnReport | None]:
    """The single-turn dialogs `config.data.single_turn` asks for (none: [], None)."""
    data, section = config.data, config.data.single_turn
    if not (section.selection or section.retrieval):
        return [], None
    dialogs, report = single_turn_dialogs(
        env_config(data), section.selection, section.retrieval,
        categories=single_turn_categories(data), k=section.retrieval_k, seed=config.seed)
    say(str(report))
    return dialogs, report


def model_directory(path: str) -> Path:
    """`config.model.path`, which an SFT run takes resolved: an HF checkpoint directory."""
    if not path or not Path(path).is_dir():  # Path("") is the working directory
        raise invalid("config.model", "path", path, "an SFT run starts from an HF checkpoint "
                         "directory; resolve names such as '' or 'embedded:base' first "
                         "(seetjax.defaults.base_model.resolve_model_path)")
    return Path(path)


class SFTRun:
    """One SFT run in a workdir: the model, the learner, the data of every stage (see the module
    docstring). `run()` trains from wherever the workdir's last checkpoint left off.
    `config.model.path` is a model directory (`model_directory`)."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str | os.PathLike):
        validate(config)
        self.config, self.workdir = config, workdir_path(workdir)
        path = model_directory(config.model.path)
        model = load_hf_checkpoint(path, **load_options(config.model))
        self.tokenizer = Tokenizer.from_pretrained(path)
        learner = learner_config(config.learner.to_dict())
        if config.copy_circuit.install:  # a resumed run's checkpoint overwrites it below
            install_copy_circuit(model)
            if config.copy_circuit.hold:
                learner = dataclasses.replace(learner, optimizer=dataclasses.replace(
                    learner.optimizer, held=learner.optimizer.held + held_columns(model.config)))
        # Copy rows draw from the tokenizer's ids (a padded embedding's rows never occur).
        self.vocab_size = min(model.config.vocab_size, len(self.tokenizer.hf))
        self.learner, self.state = create_learner(model, learner, seed=config.seed)
        self.checkpoints = Checkpointer(self.workdir / "checkpoints",
                                        keep_last=config.train.keep_checkpoints)
        self.caller: dict[str, Any] = {"stage": 0, "stage_step": 0}
        restored = self.checkpoints.restore_intact(self.state)  # a damaged one set aside
        if restored is not None:
            self.state, self.caller, _ = restored
            say(f"resumed from step {int(self.state.step)}: stage {self.caller['stage']}, "
                f"step {self.caller['stage_step']} of it")
        self.report: dict[str, Any] = {}
        groups = stage_groups(config.data)
        self.single_turn, single_turn_report = load_single_turn(config)
        if single_turn_report is not None:
            self.report["single_turn"] = dataclasses.asdict(single_turn_report)
        self.stages = [self._prepare(g, f"stage {k}") for k, g in enumerate(groups)]
        self.evaluation = (self._prepare(",".join(groups), "evaluation", config.data.eval_split)
                           if config.data.eval_split else [])
        self.by_id = {e.id: e for examples in self.stages for e in examples}
        self.buffer = None
        if config.replay.capacity:
            saved = self.caller.get("replay")
            self.buffer = (ReplayBuffer.from_state(saved, self.by_id) if saved else
                           ReplayBuffer(config.replay.capacity, config.replay.policy, config.seed))

    def _prepare(self, group: str, what: str, split: str | None = None) -> list[Example]:
        data = self.config.data
        dialogs, failed = load_dialogs(data, group, split)
        if split is None:  # a training stage: the single-turn dialogs join each one
            dialogs = [*dialogs, *self.single_turn]
        examples, formatted = format_dialogs(dialogs, self.tokenizer, data.max_len, data.truncate,
                                             data.max_observation_tokens, data.final_reply_weight)
        say(f"{what}: {formatted}")
        self.report[what] = {"data": split or group, "not_converted": failed,
                             "formatted": formatted.formatted, "left_out": formatted.dropped,
                             "truncated": list(formatted.truncated)}
        return examples

    def scorer(self) -> ModelScorer:
        """Scores under the current parameters (one compilation per bucket for the whole run)."""
        return ModelScorer(self.learner.model(self.state),
                           batch_size=self.config.coreset.batch_size,
                           logit_chunk=self.learner.config.logprob_chunk)

    def run(self) -> dict[str, float]:
        """Trains every remaining stage; returns the last logged metrics (and the evaluation)."""
        metrics: dict[str, float] = {}
        with MetricsWriter(self.workdir) as writer:
            for k in range(self.caller["stage"], len(self.stages)):
                metrics = self._train_stage(k, writer)
            if self.evaluation:
                metrics["eval/loss"] = eval_loss(self.scorer(), self.evaluation)
                writer.write(int(self.state.step), {"eval/loss": metrics["eval/loss"]})
                say(f"evaluation loss {metrics['eval/loss']:.4f} on "
                    f"{len(self.evaluation)} dialogs")
        self.checkpoints.wait()
        self.checkpoints.close()
        if self.config.train.save_model:  # every process: it gathers shards, process 0 writes
            model = self.learner.model(self.state)
            save_hf_checkpoint(model, self.workdir / "model", tokenizer=self.tokenizer)
            if has_lora(model):  # adapters merged above; alone here, for PEFT
                save_lora_adapter(model, self.workdir / "adapter",
                                  base_model_name_or_path=self.config.model.path or None)
        return metrics

    def _train_stage(self, k: int, writer: MetricsWriter) -> dict[str, float]:
        cfg, caller = self.config, self.caller
        resuming = caller["stage"] == k and caller.get("coreset") is not None
        if resuming:
            selected = [self.by_id[i] for i in caller["coreset"]]
            self.report[f"stage {k}"]["coreset"] = f"{len(selected)} ids from the checkpoint"
        else:
            coreset = coreset_config(cfg, k)
            selected, chosen = select_coreset(self.stages[k], coreset,
                                              self.scorer() if coreset.uses_model else None)
            self.report[f"stage {k}"]["coreset"] = chosen
            say(f"stage {k} coreset ({coreset.strategy}): kept {len(selected)} of "
                f"{len(self.stages[k])} examples")
        pipeline = SFTPipeline(selected, pipeline_config(cfg, k, self.tokenizer.pad_id),
                               replay=self.buffer.items if self.buffer else ())
        self.report[f"stage {k}"]["pipeline"] = pipeline.summary()
        self._write_report()
        say(f"stage {k} pipeline: {pipeline.summary()}")
        iterator = iter(pipeline)
        if resuming:
            iterator.set_state(caller["data"])
        seen = caller.get("examples_seen", 0) if resuming else 0
        metrics: dict[str, float] = {}
        for s in range(caller["stage_step"] if resuming else 0, cfg.train.steps):
            batch = next(iterator)
            start = time.perf_counter()
            rows = self._with_copy_rows(batch, int(self.state.step))
            self.state, step_metrics = self.learner.update(self.state, TrajectoryBatch(
                sequences=TokenSequences(**rows)))
            counts = segment_counts(batch)
            seen += (counts["examples"] - counts["replayed"]) * jax.process_count()
            step, last = int(self.state.step), s + 1 == cfg.train.steps
            if (s + 1) % cfg.train.log_every == 0 or last:
                metrics = {**step_metrics, **data_metrics(batch, seen, len(selected), k),
                           "step_wall_s": time.perf_counter() - start}
                writer.write(step, metrics)
                say(f"step {step}: loss {metrics.get('loss', float('nan')):.4f}, "
                    f"{metrics.get('tokens_per_s', 0):.0f} tokens/s, epoch "
                    f"{metrics['data/epoch']:.2f} of stage {k}")
            if self.evaluation and cfg.train.eval_every and step % cfg.train.eval_every == 0:
                writer.write(step, {"eval/loss": eval_loss(self.scorer(), self.evaluation)})
            if last and self.buffer is not None:
                self.buffer.add(selected)
            self.caller = ({"stage": k + 1, "stage_step": 0} if last else
                           {"stage": k, "stage_step": s + 1, "data": iterator.get_state(),
                            "coreset": [e.id for e in selected], "examples_seen": seen})
            self.caller["replay"] = self.buffer.state_dict() if self.buffer else None
            if last or step % cfg.train.checkpoint_every == 0:
                self.checkpoints.save(step, self.state, caller_state=self.caller)
        return metrics

    def _with_copy_rows(self, batch: dict[str, np.ndarray], step: int) -> dict[str, np.ndarray]:
        """The batch's token rows plus this process's share of `copy_circuit.rows` repeated-token
        rows (drawn from (seed, process, step), so a resumed run adds the same ones)."""
        rows = {k: batch[k] for k in ("tokens", "positions", "segment_ids", "loss_mask")}
        extra = copy_rows(self.config) // jax.process_count()
        if not extra:
            return rows
        rng = np.random.default_rng([self.config.seed, jax.process_index(), step])
        copies = copy_batch_rows(rng, extra, rows["tokens"].shape[1], self.vocab_size)
        return {k: np.concatenate([v, copies[k].astype(v.dtype)]) for k, v in rows.items()}

    def _write_report(self) -> None:
        if jax.process_index() == 0:
            self.workdir.mkdir(parents=True, exist_ok=True)
            (self.workdir / "data_report.json").write_text(json.dumps(self.report, indent=1))


def run(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> dict[str, float]:
    """Trains (or resumes) the run of `config` in `workdir`, which it holds alone
    (`seetjax.runtime.workdir.WorkdirLock`); returns the last logged metrics."""
    validate(config)  # before the workdir is made
    lock = WorkdirLock(workdir_path(workdir))
    try:
        return SFTRun(config, workdir).run()
    finally:
        lock.release()


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
    weights = np.array([max(e.num_trained - int(e.loss_mask[0] != 0), 1) for e in examples])
    return float((scores.losses * weights).sum() / weights.sum())
