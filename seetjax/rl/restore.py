"""A finished or stopped run's model, read back from its workdir: the config it saved, its start
model and its latest intact (or a named) checkpoint (`launch/evaluate.py --run`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import ml_collections

from seetjax.defaults.base_model import resolve_model_path
from seetjax.learner import create_learner
from seetjax.learner.checkpoint import Checkpointer
from seetjax.models.tokenizer import Tokenizer
from seetjax.models.transformer import Transformer
from seetjax.rl.config import Plan, build_plan
from seetjax.rl.policy_states import EVAL_ROLE, PolicyStates
from seetjax.rl.start_model import start_model
from seetjax.runtime import sharding


def restore_run(workdir: str | os.PathLike, step: int | None = None, role: str = EVAL_ROLE
                ) -> tuple[Transformer, Tokenizer, Plan]:
    """A run's model at checkpoint `step` (default: the latest), its tokenizer and its plan;
    `role`'s model when each role has its own parameters."""
    workdir = Path(workdir)
    config = ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text()))
    plan = build_plan(config)
    start = (workdir / "sft" / "model" if config.sft.enabled
             else resolve_model_path(config.model.path))
    model = start_model(start, config.model, seed=config.seed,
                        value_head=plan.learner.term("value") is not None)
    learner, state = create_learner(model, plan.learner, seed=config.seed,
                                    mesh=sharding.make_mesh(1, 1, 1, jax.devices()[:1]))
    policies = PolicyStates(learner, state, plan.param_roles)
    checkpoints = Checkpointer(workdir / "checkpoints")
    if step is None:
        restored = checkpoints.restore_intact(policies.checkpointed)
        if restored is None:
            raise FileNotFoundError(f"no intact checkpoint in {workdir / 'checkpoints'}")
        policies.restore(restored[0])
    else:
        policies.restore(checkpoints.restore(policies.checkpointed, step)[0])
    return policies.model(role), Tokenizer.from_pretrained(start), plan
