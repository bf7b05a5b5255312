"""The model a training run starts from: an HF directory's weights, or, with `model.preset`, a
public shape (`seetjax.models.config.PRESETS`) with random weights, built in memory.

A preset run measures the loop at a real model's size without a checkpoint on disk
(configs/scale_1_5b.py): `model.path` then only names the tokenizer ('' the embedded one). The
vocabulary is the preset's, or the tokenizer's where that is larger (ids the tokenizer lacks are
sampled and decode to nothing, so replies from random weights run to the reply budget); the
special token ids are the tokenizer directory's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flax import nnx

from seetjax.models.config import PRESETS
from seetjax.models.hf import load_hf_checkpoint, load_options
from seetjax.models.transformer import Transformer


def model_options(section: Mapping[str, Any]) -> dict[str, Any]:
    """`load_hf_checkpoint` keywords of a run config's `model` section (`path` and `preset`
    aside), checked (`load_options`); a `preset` that is not one of PRESETS is refused."""
    section = dict(section)
    preset = section.pop("preset", "")
    if preset and preset not in PRESETS:
        raise ValueError(f"preset={preset!r}: not one of {sorted(PRESETS)}")
    return load_options(section)


def start_model(path: str | Path, section: Mapping[str, Any], *, seed: int,
                value_head: bool = False) -> Transformer:
    """The model at `path` loaded as `section` (a run config's `model`) says (a value head
    absent there initialised as `load_hf_checkpoint` does); with `section["preset"]`, that shape
    with weights drawn from `seed` (see the module docstring)."""
    options = model_options(section)
    preset = section.get("preset", "")
    if not preset:
        return load_hf_checkpoint(path, **options, value_head=value_head)
    hf = json.loads((Path(path) / "config.json").read_text())
    cfg = PRESETS[preset].replace(
        vocab_size=max(PRESETS[preset].vocab_size, hf["vocab_size"]),
        bos_token_id=hf.get("bos_token_id"), eos_token_id=hf.get("eos_token_id"),
        pad_token_id=hf.get("pad_token_id"), param_dtype=options["dtype"],
        dtype=options["compute_dtype"] or options["dtype"], remat=options["remat"],
        attention_block=options["attention_block"], attention_impl=options["attention_impl"],
        value_head=value_head)
    return Transformer(cfg, rngs=nnx.Rngs(seed))
