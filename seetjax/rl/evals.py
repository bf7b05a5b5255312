"""A training run's greedy evaluations: the milestones (untrained, after SFT, after RL) and the
periodic ones after RL steps (`train.eval_every`, `train.eval_at_stage_ends`). The milestones and
the periodic evaluations that cover the held-out splits are kept in the workdir's evals/ as
<name>.json (see seetjax.rl.milestones)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
from flax import nnx

from seetjax.errors import invalid
from seetjax.eval.evaluate import EVAL_STAGE
from seetjax.models.tokenizer import Tokenizer
from seetjax.rl.config import Plan
from seetjax.rl.milestones import (
    STEP_PREFIX,
    Milestone,
    drop_step_milestones,
    evaluate_milestone,
    load_step_milestones,
)
from seetjax.rl.start_model import start_model
from seetjax.rollout.loop import Rollout
from seetjax.rollout.policy import SamplerPolicy
from seetjax.sampling import Sampler, SamplingParams


class RunEvaluations:
    """The evaluation rollouts of one run (its `plan.eval_rollout`, one per decoding in
    `plan.eval_decodings`) over this process's share of the tasks: `train_tasks` (a few per
    category of the training tasks) and `split_tasks` (each evaluation split's)."""

    def __init__(self, workdir: Path, plan: Plan, tokenizer: Tokenizer,
                 train_tasks: Sequence[Any], split_tasks: dict[str, list[Any]]):
        self.dir = Path(workdir) / "evals"
        self.train_tasks, self.split_tasks = list(train_tasks), split_tasks
        self.rollout = Rollout(tokenizer, plan.eval_rollout)
        env = plan.eval_rollout.env
        self.decodings = {d: self.rollout if d == env.decoding else Rollout(
            tokenizer, dataclasses.replace(plan.eval_rollout,
                                           env=dataclasses.replace(env, decoding=d)))
            for d in plan.eval_decodings}

    def check_prompts_fit(self, tasks: Sequence[Any], max_episode_tokens: int) -> None:
        """Every opening prompt of `tasks` and of the splits leaves room for a reply within
        `max_episode_tokens` (checked before any work: otherwise every episode of such a task
        would end before its first reply)."""
        unique = {t.id: t for t in [*tasks, *(t for ts in self.split_tasks.values() for t in ts)]}
        episodes = self.rollout.episodes(list(unique.values()), EVAL_STAGE, progress=1.0, seed=0)
        longest = max(episodes, key=lambda e: len(e.prompt))
        if len(longest.prompt) + 2 > max_episode_tokens:
            raise invalid(
                "config.limits", "max_episode_tokens", max_episode_tokens, "the opening "
                f"prompt of task {longest.task.id} alone has {len(longest.prompt)} tokens")

    def evaluate(self, name: str, policy: SamplerPolicy, held_out: bool = True) -> Milestone:
        """Milestone `name`: greedy episodes of the training tasks and, if `held_out`, of the
        splits, under every decoding."""
        return evaluate_milestone(name, self.rollout, policy, self.train_tasks,
                                  self.split_tasks if held_out else {}, self.decodings)

    def cached(self, name: str, policy: Callable[[], SamplerPolicy]) -> Milestone:
        """Milestone `name` from evals/, or evaluated with `policy()` and kept there, so a
        resumed run has it without rerunning (or even loading) the policy."""
        path = self.dir / f"{name}.json"
        if path.exists():
            return Milestone.from_json(json.loads(path.read_text()))
        milestone = self.evaluate(name, policy())
        self.keep(milestone)
        return milestone

    def after_step(self, step: int, policy: SamplerPolicy, held_out: bool) -> Milestone:
        """The periodic evaluation after RL step `step`; kept as evals/step_<step>.json when it
        covers the splits (the report's milestone table lists those)."""
        milestone = self.evaluate(f"{STEP_PREFIX}{step}", policy, held_out)
        if held_out and self.split_tasks:
            self.keep(milestone)
        return milestone

    def keep(self, milestone: Milestone) -> None:
        """Writes `milestone` to evals/<name>.json (process 0: the figures are the same on all)."""
        if jax.process_index() == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / f"{milestone.name}.json").write_text(json.dumps(milestone.to_json()))

    def steps(self) -> list[Milestone]:
        """The kept periodic evaluations, by step."""
        return load_step_milestones(self.dir)

    def drop_after(self, step: int) -> None:
        """Forgets the periodic evaluations after `step` (a resumed run evaluates them again)."""
        if jax.process_index() == 0:
            drop_step_milestones(self.dir, after=step)


def greedy_policy(path: Path, model: ml_collections.ConfigDict, tokenizer: Tokenizer,
                  seed: int) -> SamplerPolicy:
    """Greedy decoding with the checkpoint at `path`, loaded as `model` (the run's model section)
    says (`start_model`: a preset's random weights drawn from `seed`): the untrained milestone's
    policy."""
    loaded = start_model(path, model, seed=seed)
    return SamplerPolicy(Sampler(loaded, pad_id=tokenizer.pad_id), nnx.state(loaded),
                         SamplingParams(temperature=0.0), tokenizer.stop_ids,
                         jax.random.key(seed))
