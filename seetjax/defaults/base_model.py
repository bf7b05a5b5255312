"""The pretrained embedded default, `model.path = "embedded:base"`: the embedded tiny model
(`seetjax.defaults.embedded`) SFT-trained on ground-truth dialogs of generated tasks, so runs start
from a policy that already calls tools, with room to improve.

Built on first use with `seetjax.sft.run.SFTRun` and cached like the embedded default
(`cached_directory`): the same spec, generator and packages give the same cache entry; on one
machine (one XLA build) the build is deterministic. The dialogs come from a generated stream of
the training vocabulary no run trains on (`BaseSpec.stream_seed`), rendered as the runs render
them (compact prompts, signatures only), so held-out generated tasks (test vocabulary) and BFCL
stay unseen.

`resolve_model_path` maps a config's `model.path` to a directory: '' (or "embedded") is the
randomly initialised embedded default, "embedded:base" this one, anything else a path.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

import ml_collections

from seetjax.defaults.embedded import EmbeddedSpec, embedded_model_dir, generator_digest
from seetjax.report.console import say
from seetjax.runtime.cache import cached_directory

EMBEDDED = "embedded"
EMBEDDED_BASE = "embedded:base"
# Bumped when the builder or the training numerics change (3: the attention backward and 2-D
# projections of 2026-11-25 round differently), so a cached base is what a fresh build would be.
_BUILDER_VERSION = 3


@dataclasses.dataclass(frozen=True)
class BaseSpec:
    """What the base is trained on and how; any change gives a new cache entry.

    tasks_per_category, categories: generated tasks per category, of these categories;
    named_values, classes, max_turns: their difficulty (`data.generated`): by default the
        copy-free tier (`Difficulty.named_values=False`) on one API class, 1-2 turns, which a
        4M-parameter model learns in minutes and generalises on to held-out paraphrases;
    steps, batch_size, seq_len, learning_rate: the SFT run (AdamW, warmup + cosine); 100 steps
        (under one epoch, ~3.5 min on 2 cores) leave held-out accuracy near 30%, room for RL;
    stream_seed: the generated stream of its dialogs (runs use other seeds);
    description_chars: compact prompts' characters of each tool description (0: signatures);
    max_observation_tokens: tool observations cut as the testbed's rollouts cut them
        (`limits.max_observation_tokens`), so the base trains on what its policy will see
        (uncut, 97 of the 768 dialogs overflowed `seq_len` mid-dialog and lost their later turns).
    """

    tasks_per_category: int = 256
    categories: str = "base,miss_func,long_context"
    named_values: bool = False
    classes: int = 1
    max_turns: int = 2
    steps: int = 100
    batch_size: int = 4
    seq_len: int = 1024
    learning_rate: float = 1e-3
    stream_seed: int = 1000
    description_chars: int = 0
    max_observation_tokens: int = 256
    embedded: EmbeddedSpec = EmbeddedSpec()


def base_sft_config(spec: BaseSpec, model_dir: str | os.PathLike) -> ml_collections.ConfigDict:
    """The SFT config that trains the base from `model_dir` (the embedded default)."""
    from seetjax.sft.config import default_sft_config  # the SFT side, only when building

    config = default_sft_config()
    config.model.path = str(model_dir)
    data = config.data
    data.source, data.split, data.eval_split = "generated", "train", ""
    data.generated.seed = spec.stream_seed
    data.generated.named_values = spec.named_values
    data.generated.classes = spec.classes
    data.generated.max_turns = spec.max_turns
    data.categories = spec.categories
    data.tasks_per_category = spec.tasks_per_category
    data.compact_description_chars = spec.description_chars
    data.max_observation_tokens = spec.max_observation_tokens
    data.max_len = data.seq_len = spec.seq_len
    data.batch_size = spec.batch_size
    config.learner.optimizer.learning_rate = spec.learning_rate
    config.learner.optimizer.decay_steps = spec.steps
    config.train.steps = spec.steps
    config.train.eval_every = 0
    config.train.checkpoint_every = spec.steps
    config.train.log_every = max(1, spec.steps // 10)
    return config


def build_base_model(out_dir: str | os.PathLike, spec: BaseSpec | None = None) -> Path:
    """Trains the base (see the module docstring) and writes it to `out_dir` as an HF directory."""
    from seetjax.sft.run import SFTRun

    spec = spec or BaseSpec()
    dialogs = spec.tasks_per_category * len(spec.categories.split(","))
    say(f"building the pretrained embedded default ({spec.steps} SFT steps on {dialogs} "
        "generated dialogs; cached after this once)")
    work = Path(tempfile.mkdtemp(prefix="seetjax-base-"))
    try:
        SFTRun(base_sft_config(spec, embedded_model_dir(spec.embedded)), work).run()
        shutil.copytree(work / "model", out_dir, dirs_exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Path(out_dir)


def base_model_dir(spec: BaseSpec | None = None,
                   cache_dir: str | os.PathLike | None = None) -> Path:
    """The base's directory under `cache_dir` (default: the cache root), built on first use
    (`cached_directory`) from the embedded default in the cache root."""
    spec = spec or BaseSpec()
    key = [_BUILDER_VERSION, dataclasses.asdict(spec), generator_digest(),
           embedded_model_dir(spec.embedded).name]
    return cached_directory("embedded-base", key, lambda tmp: build_base_model(tmp, spec),
                            cache_dir)


def untrained_model_path(path: str) -> Path:
    """The model a config's `model.path` starts from before any training: for "embedded:base"
    the embedded default it was trained from (its SFT is the run's warm-up, done once and
    cached), for anything else the model itself."""
    return embedded_model_dir(BaseSpec().embedded) if path == EMBEDDED_BASE else (
        resolve_model_path(path))


def resolve_model_path(path: str) -> Path:
    """A config's `model.path` as a directory ('' / "embedded", "embedded:base", or a path)."""
    if path in ("", EMBEDDED):
        return embedded_model_dir()
    if path == EMBEDDED_BASE:
        return base_model_dir()
    return Path(path)
