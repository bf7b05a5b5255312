"""Config sections that run configs and SFT configs share, and loading a config file: how one
config builds on another. Declarations only: nothing here imports a runner."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import ml_collections

from seetjax.models.lora import ALL_PROJECTIONS


def load_config_file(path: str | os.PathLike, *args: Any) -> ml_collections.ConfigDict:
    """`get_config(*args)` of a config file: how one config builds on another
    (`load_config_file(Path(__file__).with_name("tiny.py"))`)."""
    spec = importlib.util.spec_from_file_location(f"config_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(*args)


def lora_section() -> ml_collections.ConfigDict:
    """`learner.lora` of run configs (seetjax.models.lora.LoRAConfig): rank 0 = full fine-tuning;
    alpha: the update is scaled by alpha / rank; targets: comma-separated projection names
    (seetjax.models.lora.ALL_PROJECTIONS); dropout: must stay 0 (adapter dropout is not
    implemented). The run's exported model (workdir/model) has the adapters merged into its
    kernels; workdir/adapter holds them alone, in PEFT's layout."""
    return ml_collections.ConfigDict(dict(rank=0, alpha=16.0, targets=",".join(ALL_PROJECTIONS),
                                          dropout=0.0))


def generated_section() -> ml_collections.ConfigDict:
    """`data.generated` of run and SFT configs, read when `data.source` is "generated"
    (seetjax.envs.task_source.task_source): the stream's seed, turns per task (min, max),
    requests per turn, calls per turn, API classes used per task, distractor classes listed but
    not needed, state-size scale, the classes drawn from ('' = all), and whether requests may
    name values the calls copy (False: the copy-free tier, `Difficulty.named_values`)."""
    return ml_collections.ConfigDict(dict(
        seed=0, min_turns=1, max_turns=4, actions_per_turn=2, calls_per_turn=3, classes=2,
        distractor_classes=0, state_size=1, api_classes="", named_values=True))
