"""The outer loop: SFT warm-up, then RL rollouts under SEET's curriculum, then evaluation.

    python launch/train.py --config=configs/tiny.py --workdir=runs/tiny

Each RL step: the curriculum's stage -> B tasks x G samples rolled out with the current parameters
(fast loop inside) -> slow loop (anchors, counterfactual records) -> TrajectoryBatch -> one learner
update -> metrics, records, curriculum step, checkpoint. With `rollout.mode="engine"` the
rollouts play through one serving engine made for the run (its programs and prefix cache kept
across steps), given the learner's weights whenever its version moves on. The RL phase ends
after `train.steps` steps, or earlier, after the step at which the policy tokens sampled so far
(retries included, over all processes) reach `train.max_policy_tokens`, so that runs can be compute-matched. A
workdir resumes where its last intact checkpoint left off, SFT and the token count included;
everything is deterministic given the config, so a resumed run continues exactly. A damaged
checkpoint (a checksum that differs, its caller state or anchor pool missing) is set aside and the
one before it taken; with none left the run refuses unless told to `start_over`. One process
holds a workdir at a time (`seetjax.runtime.workdir.WorkdirLock`), and a full disk stops the run naming
its step. Each process rolls out
its own share of the tasks (task i belongs to process i mod P, so a process's anchor pool always
covers the tasks it sees).
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from tqdm import tqdm

from seetjax.defaults.base_model import EMBEDDED_BASE, resolve_model_path, untrained_model_path
from seetjax.envs import registry
from seetjax.errors import invalid
from seetjax.eval.reports import split_reports
from seetjax.learner import create_learner
from seetjax.learner.sharding import mesh_from_config
from seetjax.learner.update_signal import update_has_signal
from seetjax.models.tokenizer import Tokenizer
from seetjax.report.console import say
from seetjax.report.metrics import MetricsWriter
from seetjax.report.plots import plot_curves, read_metrics
from seetjax.rl.alarms import Alarms, call_counts
from seetjax.rl.async_rollouts import check_devices, split_devices
from seetjax.rl.config import build_plan
from seetjax.rl.evals import RunEvaluations, greedy_policy
from seetjax.rl.milestones import Milestone, first_per_category
from seetjax.rl.policy_states import PolicyStates
from seetjax.rl.report import run_report
from seetjax.rl.run_checkpoints import RunCheckpoints
from seetjax.rl.start_model import start_model
from seetjax.rl.step_figures import live_gib, step_figures
from seetjax.rl.step_rollouts import StepRollouts, check_engine_mesh, sample_mesh
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.loop import Rollout
from seetjax.rollout.multi_agent import MultiAgentRollout
from seetjax.rollout.policy import SamplerPolicy
from seetjax.rollout.preferences import rollout_preferences
from seetjax.rollout.result import RolloutResult
from seetjax.rollout.versions import version_stats
from seetjax.runtime.sync import local_shard, mean_over_processes
from seetjax.runtime.workdir import WorkdirLock, full_disk_reported, workdir_path
from seetjax.sampling import Sampler, SamplingParams
from seetjax.seet.anchors import AnchorPool
from seetjax.seet.curriculum import Curriculum
from seetjax.seet.records import write_jsonl


class TrainRun:
    """One training run in a workdir (see the module docstring)."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str | os.PathLike, *,
                 start_over: bool = False):
        self.plan = build_plan(config)  # fails on a bad config before anything loads
        if config.data.tasks_per_step % jax.process_count():
            raise invalid("config.data", "tasks_per_step", config.data.tasks_per_step,
                          f"must be a multiple of the {jax.process_count()} processes")
        if self.plan.rollout.mode == "engine" and not self.plan.schedule.sampler_devices:
            check_engine_mesh(self.plan.learner.mesh)  # the engine samples on the learner's mesh
        if self.plan.schedule.schedule == "async" or self.plan.schedule.sampler_devices:
            check_devices(self.plan.schedule)
        self.config, self.workdir = config, workdir_path(workdir)
        self.start_over = start_over  # with every checkpoint damaged: train from step 0
        self.lock = WorkdirLock(self.workdir)  # before writing anything
        self.rollouts: StepRollouts | None = None  # made with the model: `_setup`
        if jax.process_index() == 0:  # what `restore_run` and launch/evaluate.py --run read
            (self.workdir / "config.json").write_text(config.to_json_best_effort(indent=2))

    # ---------------------------------------------------------------- the run

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            if self.rollouts is not None:  # no decode or rollout thread outlives the run
                self.rollouts.stop()
            self.lock.release()

    def _run(self) -> dict[str, Any]:
        start = time.perf_counter()
        base = resolve_model_path(self.config.model.path)
        env, data = self.plan.rollout.env, self.config.data.to_dict()
        load = registry.spec_of(env).load_tasks
        tasks = load(env, data, self.config.data.split,
                     self.config.data.tasks_per_category or None)
        self.tasks = local_shard(tasks)
        # SFT keeps the tokenizer: one set of evaluation rollouts serves every milestone. The
        # training-task figures use a few tasks per category: a run may train on thousands.
        tokenizer = Tokenizer.from_pretrained(base)
        self.evals = RunEvaluations(
            self.workdir, self.plan, tokenizer,
            local_shard(first_per_category(tasks, self.config.eval.per_category)),
            {s: local_shard(load(env, data, s, count or None))
             for s, count in self.plan.eval_splits.items()})
        self.evals.check_prompts_fit(self.tasks, self.plan.rollout.limits.max_episode_tokens)
        path = self.config.model.path
        untrained_policy = functools.partial(greedy_policy, untrained_model_path(path),
                                             self.config.model, tokenizer, self.config.seed)
        # "embedded:base" is its own warm-up: SFT on generated dialogs, done once and cached
        warmed_up = self.config.sft.enabled or path == EMBEDDED_BASE
        if warmed_up:
            untrained = self.evals.cached("untrained", untrained_policy)
        self._setup(self._warm_up(base))
        if not warmed_up:  # the start model is the untrained one: before any update the run's
            # own sampler serves, one model and one set of compilations fewer (a minute at 1.5B)
            untrained = self.evals.cached(
                "untrained", self._policy if self.step == 0 else untrained_policy)
        after_sft = (self.evals.cached("after_sft", self._policy) if warmed_up
                     else untrained.renamed("after_sft"))
        if self.step == 0:  # not resumed: the curves start from both points
            self.writer.write(0, {**untrained.metrics(), **after_sft.metrics()})
        total = self.config.train.steps
        bar = tqdm(range(self.step, total), initial=self.step, total=total, desc="rl",
                   disable=jax.process_index() != 0, dynamic_ncols=True)
        self.rollouts.start_ahead(self.step, total, self.curriculum)
        for step in bar:
            if self._budget_spent():  # a resumed run whose budget ran out before train.steps
                break
            with full_disk_reported(f"RL step {step + 1}", self.workdir, self.checkpoints.close):
                metrics = self._rl_step(step)
            bar.set_postfix(stage=int(metrics["stage"]), reward=f"{metrics['rollout/reward']:.2f}",
                            acc=f"{metrics['rollout/checked_turn_accuracy']:.2f}",
                            fmt=f"{metrics['rollout/format_validity']:.2f}",
                            s=f"{metrics['time/rollout_s']:.1f}+{metrics['time/learn_s']:.1f}")
        bar.close()
        self.rollouts.close_ahead()
        with full_disk_reported(f"RL step {self.step}", self.workdir, self.checkpoints.close):
            self.checkpoints.wait()
        final = self._finish((untrained, after_sft), time.perf_counter() - start)
        self.writer.close()
        return final

    def _warm_up(self, base: Path) -> Path:
        """SFT on ground-truth dialogs (skipped when disabled); returns the model to train."""
        if not self.config.sft.enabled:
            return base
        sft_dir = self.workdir / "sft"
        if not (sft_dir / "model" / "config.json").exists():
            from seetjax.sft.run import SFTRun  # only runs that warm up need the SFT data side
            sft = self.config.sft.run.copy_and_resolve_references()
            sft.model.path = str(base)
            say(f"SFT warm-up -> {sft_dir}")
            SFTRun(sft, sft_dir).run()
        return sft_dir / "model"

    def _setup(self, model_path: Path) -> None:
        plan, config = self.plan, self.config
        self.tokenizer = Tokenizer.from_pretrained(model_path)
        model = start_model(model_path, config.model, seed=config.seed,
                            value_head=plan.learner.term("value") is not None)
        sample, learn = split_devices(plan.schedule.sampler_devices)
        learner, state = create_learner(
            model, plan.learner, seed=config.seed,
            mesh=mesh_from_config(plan.learner.mesh, learn) if learn else None)
        self.policies = PolicyStates(
            learner, state, plan.param_roles,
            sample_mesh=sample_mesh(sample, plan.rollout.mode) if sample else None)
        self.sampler = Sampler(learner.model(state), pad_id=self.tokenizer.pad_id,
                               mesh=self.policies.sample_mesh)
        self.pool = AnchorPool(config.seet.anchors.capacity, config.seet.anchors.max_age or None)
        self.rollout = (MultiAgentRollout(self.tokenizer, plan.rollout, plan.multi_agent)
                        if plan.multi_agent else Rollout(self.tokenizer, plan.rollout, self.pool))
        self.curriculum = Curriculum(plan.stages, plan.transitions)
        self.alarms = Alarms(plan.alarms)
        self.checkpoints = RunCheckpoints(self.workdir, plan, config.train.keep_checkpoints,
                                          self.start_over)
        # the policy tokens: sampled in the RL steps so far, over all processes; resumed before
        # the writer opens metrics.jsonl, which it may rewrite
        self.step, self.policy_tokens = self.checkpoints.resume(self.policies, self.curriculum,
                                                                self.pool, self.evals)
        self.writer = MetricsWriter(self.workdir)
        self.rollouts = StepRollouts(config, plan, self.policies, self.sampler, self.tokenizer,
                                     self.rollout, self.tasks)

    def _rl_step(self, step: int) -> dict[str, float]:
        started = time.perf_counter()
        result, stage, synced = self.rollouts(step, self.curriculum)
        rolled = time.perf_counter()
        versions = {k: v for role, part in self.policies.parts(result).items()  # before updates
                    for k, v in self.policies.named(role, version_stats(
                        part.episodes, self.policies.version(role))).items()}
        live = live_gib()
        learned, counts, batched = self._learn(result, step)
        learned_at = time.perf_counter()
        times = {"rollout_s": rolled - started, "batch_s": batched - rolled,
                 "learn_s": learned_at - batched,
                 **{f"rollout_{k}": v for k, v in result.times.metrics().items()}}
        rollout = mean_over_processes({**result.stats(), **counts, **call_counts(result)})
        rollout["policy_tokens"] *= jax.process_count()  # the step's total, not a mean
        self.policy_tokens += round(rollout["policy_tokens"])
        metrics = {"stage": float(stage.stage), "seet/retry_probability":
                   stage.retry_probability(self.curriculum.progress),
                   **{f"rollout/{k}": v for k, v in rollout.items()},
                   "rollout/cumulative_policy_tokens": float(self.policy_tokens),
                   **{f"rollout/{k}": v for k, v in versions.items()},
                   **{f"learner/{k}": v for k, v in learned.items()}, **synced,
                   **step_figures(self.policies.learner, self.sampler, live)}
        self._write_records(result)
        every = self.config.train.eval_every
        periodic = bool(every) and (step + 1) % every == 0
        if periodic:
            metrics.update(self._periodic_eval(step + 1))
            times["eval_s"] = time.perf_counter() - learned_at
        metrics.update({f"time/{k}": v for k, v in times.items()})
        changed = self.curriculum.step({k.split("/", 1)[-1]: v for k, v in metrics.items()})
        if changed and self.config.train.eval_at_stage_ends and not periodic:
            ended = time.perf_counter()
            metrics.update(self._periodic_eval(step + 1))
            metrics["time/eval_s"] = time.perf_counter() - ended
        metrics.update(self.alarms.check(step + 1, metrics))
        self.writer.write(step + 1, metrics)
        self.alarms.enforce(step + 1)  # alarms.fail_on_alarm: after the step's metrics are out
        self.step = step + 1
        self.rollouts.published(self.step, self.curriculum)
        if (self.step % self.config.train.checkpoint_every == 0
                or self.step == self.config.train.steps or self._budget_spent()):
            self.checkpoints.save(self.step, self.policies, self.curriculum, self.pool,
                                  self.policy_tokens)
        return metrics

    def _budget_spent(self) -> bool:
        """Whether `train.max_policy_tokens` (0: no budget) is reached: the RL phase is over."""
        budget = self.config.train.max_policy_tokens
        return bool(budget) and self.policy_tokens >= budget

    def _learn(self, result: RolloutResult, step: int) -> tuple[dict[str, float],
                                                                dict[str, float], float]:
        """Each parameter set's update on its episodes of `result` (`PolicyStates.parts`): the
        learner metrics (named by role when the sets are separate), the record counts, and
        when the batches were ready (`time.perf_counter()`)."""
        parts = self.policies.parts(result)
        batches = {role: self._batch(part, step) for role, part in parts.items() if part.episodes}
        counts = self._record_counts(result, *batches.values())  # before an update consumes them
        batched = time.perf_counter()
        learned = {}
        for role in parts:
            signal = role in batches and update_has_signal(self.plan.learner, batches[role])
            if mean_over_processes({"signal": float(signal)})["signal"] > 0:
                metrics = self.policies.update(role, batches[role])
            else:  # every gradient would be zero: save the compute (DAPO's dynamic sampling)
                metrics = {"no_signal": 1.0}
            learned.update(self.policies.named(role, metrics))
        return learned, counts, batched

    def _batch(self, result: RolloutResult, step: int):
        divisor = max(1, self.policies.learner.batch_divisor // jax.process_count())
        if self.plan.learner.term("dpo") is not None:
            return rollout_preferences(result, self.tokenizer.pad_id, divisor,
                                       self.plan.row_length)
        # counterfactual pairs drawn uniformly from all the step's records (not the first tasks'),
        # seeded by run, step and process: a resumed run draws the same ones
        return trajectory_batch(result, pad_id=self.tokenizer.pad_id, row_multiple=divisor,
                                length=self.plan.row_length, max_pairs=self.plan.max_pairs or None,
                                pair_seed=(self.config.seed, step, jax.process_index()),
                                rows_per_episode=self.plan.rollout.branch.rows_per_episode)

    def _record_counts(self, result: RolloutResult, *batches) -> dict[str, float]:
        """Counterfactual records the slow loop produced vs those trained on this step, in the
        step's `batches` (a DPO batch's pairs are not records)."""
        dpo = self.plan.learner.term("dpo") is not None
        trained = sum((float(np.asarray(b.pairs.weights).sum()) for b in batches
                       if not dpo and b.pairs is not None), 0.0)
        return {"records_available": float(len(result.records)), "records_trained": trained}

    def _write_records(self, result: RolloutResult) -> None:
        if result.records:
            suffix = f".p{jax.process_index()}" if jax.process_count() > 1 else ""
            write_jsonl(result.records, self.workdir / f"counterfactual_records{suffix}.jsonl")

    # ---------------------------------------------------------------- evaluation

    def _policy(self) -> SamplerPolicy:
        """The evaluations' greedy policy (with separate sets, the `EVAL_ROLE`'s parameters)."""
        return SamplerPolicy(self.sampler, self.policies.sampling_params(),
                             SamplingParams(temperature=0.0),
                             self.tokenizer.stop_ids, jax.random.key(self.config.seed))

    def _periodic_eval(self, step: int) -> dict[str, float]:
        """The evaluation after RL step `step` (`train.eval_every`, `train.eval_at_stage_ends`):
        the training tasks and, with `train.eval_held_out`, the evaluation splits."""
        with self.rollouts.paused():
            return self.evals.after_step(step, self._policy(),
                                         self.config.train.eval_held_out).metrics()

    def _finish(self, milestones: tuple[Milestone, Milestone], seconds: float) -> dict[str, Any]:
        """The after-RL evaluation, model export, summary.json, report.md and curves.png."""
        final = self.evals.evaluate("after_rl", self._policy())
        milestones = (*milestones, final)
        self.writer.write(self.step, final.metrics())
        self.writer.flush()
        self.policies.export(self.workdir, self.tokenizer, self.config.model.path or None)
        summary = {"evals": {m.name: m.to_json() for m in milestones}, "seconds": seconds}
        self.evals.keep(final)
        if jax.process_index() == 0:
            (self.workdir / "summary.json").write_text(json.dumps(summary, indent=2))
            rows = read_metrics(self.workdir / "metrics.jsonl")
            plot_curves(rows, self.workdir / "curves.png", title=str(self.workdir.name))
            (self.workdir / "report.md").write_text(run_report(
                self.workdir.name, self.step, seconds,
                (*milestones[:-1], *self.evals.steps(), final), rows))
            say(split_reports(final.env).markdown(list(final.splits.values())))
        return summary


def train(config: ml_collections.ConfigDict, workdir: str | os.PathLike, *,
          start_over: bool = False) -> dict[str, Any]:
    return TrainRun(config, workdir, start_over=start_over).run()
