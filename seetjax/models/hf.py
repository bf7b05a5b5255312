"""Hugging Face checkpoint directories <-> seetjax models, without torch or transformers' configs.

A directory holds `config.json`, `model.safetensors` (or numbered shards plus
`model.safetensors.index.json`) and, optionally, tokenizer files. Parameter names follow the HF
modules one to one; dense kernels are stored transposed ([out, in] in HF, [in, out] here). A PPO
value head, which HF causal-LM classes do not have, is kept beside them in `value_head.safetensors`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import safetensors.numpy
from flax import nnx
from jax.sharding import Mesh

from seetjax.errors import invalid
from seetjax.models.config import ModelConfig, RopeScaling
from seetjax.models.lora import has_lora, lora_layers, merge_lora
from seetjax.models.safetensors_io import SafetensorsReader, write_sharded
from seetjax.models.transformer import Transformer
from seetjax.runtime import sharding

log = logging.getLogger(__name__)

VALUE_HEAD_FILE = "value_head.safetensors"
_ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
_LEAF_NAMES = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}
# What transformers' Qwen2Config and LlamaConfig (5.x) take for a field config.json leaves out. A
# null num_key_value_heads or head_dim means "as many as the query heads" / hidden // heads.
_COMMON_DEFAULTS: dict[str, Any] = dict(
    hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, head_dim=None,
    hidden_act="silu", initializer_range=0.02, rms_norm_eps=1e-6, tie_word_embeddings=False,
    pad_token_id=None, rope_theta=10000.0)
_HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2": dict(_COMMON_DEFAULTS, vocab_size=151936, intermediate_size=22016,
                  num_key_value_heads=32, max_position_embeddings=32768, bos_token_id=None,
                  eos_token_id=None, use_sliding_window=False),
    "llama": dict(_COMMON_DEFAULTS, vocab_size=32000, intermediate_size=11008,
                  num_key_value_heads=None, max_position_embeddings=2048, bos_token_id=1,
                  eos_token_id=2, attention_bias=False, mlp_bias=False),
}


def config_from_hf(hf_config: Mapping[str, Any], **overrides: Any) -> ModelConfig:
    """ModelConfig from a parsed config.json, read as transformers reads it (absent fields take
    its defaults; legacy `rope_theta` + `rope_scaling` as well as `rope_parameters`) without
    importing it; `overrides` set seetjax-only fields."""
    model_type = hf_config.get("model_type")
    if model_type not in _HF_DEFAULTS:
        raise ValueError(f"config.json: model_type={model_type!r} is not one of "
                         f"{sorted(_HF_DEFAULTS)}")
    hf = {**_HF_DEFAULTS[model_type], **hf_config}
    if hf["hidden_act"] != "silu":
        raise ValueError(f"config.json: hidden_act={hf['hidden_act']!r}; only silu (SwiGLU) is "
                         "supported")
    if hf.get("use_sliding_window"):
        raise ValueError("config.json: use_sliding_window=true is not supported")
    rope_theta, scaling = _rope_from_hf(hf)
    if model_type == "qwen2":
        qkv_bias, o_bias, mlp_bias = True, False, False
    else:
        qkv_bias = o_bias = bool(hf["attention_bias"])
        mlp_bias = bool(hf["mlp_bias"])
    fields = dict(
        model_type=model_type, vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"], num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        num_kv_heads=hf["num_key_value_heads"] or hf["num_attention_heads"],
        head_dim=hf["head_dim"] or 0, rope_theta=rope_theta, rope_scaling=scaling,
        rms_norm_eps=hf["rms_norm_eps"], qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias,
        tie_word_embeddings=bool(hf["tie_word_embeddings"]),
        max_position_embeddings=hf["max_position_embeddings"],
        initializer_range=hf["initializer_range"], bos_token_id=hf["bos_token_id"],
        eos_token_id=hf["eos_token_id"], pad_token_id=hf["pad_token_id"])
    fields.update(overrides)
    return ModelConfig(**fields)


def _rope_from_hf(hf: Mapping[str, Any]) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) as transformers standardises them: a legacy `rope_scaling` dict
    (`type` or `rope_type`) takes precedence over `rope_parameters`, and a theta inside the dict
    over a top-level `rope_theta`."""
    rope = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    theta = float(rope.get("rope_theta", hf["rope_theta"]))
    if rope_type == "default":
        return theta, None
    if rope_type == "llama3":
        return theta, RopeScaling(
            factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
            high_freq_factor=float(rope["high_freq_factor"]),
            original_max_position_embeddings=int(rope.get("original_max_position_embeddings",
                                                          hf["max_position_embeddings"])))
    raise ValueError(f"config.json: rope_type={rope_type!r} is not supported "
                     "(default and llama3 are)")


def config_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    """The config.json describing `cfg`, as transformers' Qwen2Config / LlamaConfig read it."""
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        rope.update(rope_type="llama3", factor=s.factor, low_freq_factor=s.low_freq_factor,
                    high_freq_factor=s.high_freq_factor,
                    original_max_position_embeddings=s.original_max_position_embeddings)
    hf: dict[str, Any] = dict(
        architectures=[_ARCHITECTURES[cfg.model_type]], model_type=cfg.model_type,
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, hidden_act="silu",
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=cfg.rms_norm_eps, rope_parameters=rope,
        tie_word_embeddings=cfg.tie_word_embeddings, initializer_range=cfg.initializer_range,
        bos_token_id=cfg.bos_token_id, eos_token_id=_as_json(cfg.eos_token_id),
        pad_token_id=cfg.pad_token_id, attention_dropout=0.0, use_cache=True,
        dtype=cfg.param_dtype)
    if cfg.model_type == "qwen2":
        if not cfg.qkv_bias or cfg.o_bias or cfg.mlp_bias:
            raise ValueError("a qwen2 checkpoint has q/k/v biases and no o_proj or MLP biases")
        hf.update(use_sliding_window=False)
    else:
        if cfg.qkv_bias != cfg.o_bias:
            raise ValueError("a llama checkpoint has biases on all of q/k/v/o_proj or on none")
        hf.update(attention_bias=cfg.qkv_bias, mlp_bias=cfg.mlp_bias)
    return hf


def _as_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def hf_name(path: tuple[Any, ...]) -> tuple[str, bool]:
    """Our state path -> (HF tensor name, whether the array is stored transposed)."""
    *modules, leaf = (str(p) for p in path)
    prefix = "" if modules[0] in ("lm_head", "value_head") else "model."
    return f"{prefix}{'.'.join(modules)}.{_LEAF_NAMES[leaf]}", leaf == "kernel"


# A run config's `model` section besides `path`: how a checkpoint is loaded, with defaults.
LOAD_FIELDS = {"dtype": "float32", "compute_dtype": "float32", "remat": "none",
               "attention_block": ModelConfig.attention_block,
               "attention_impl": ModelConfig.attention_impl}


def load_options(model_section: Mapping[str, Any]) -> dict[str, Any]:
    """`load_hf_checkpoint` keywords from a run config's `model` section (`path` aside), checked
    against ModelConfig's rules so that a bad value fails before anything is loaded."""
    options = {k: v for k, v in model_section.items() if k != "path"}
    unknown = sorted(set(options) - set(LOAD_FIELDS))
    if unknown:
        raise invalid("model", unknown[0], options[unknown[0]],
                      f"unknown field(s) {unknown}; known: {['path', *LOAD_FIELDS]}")
    options = {**LOAD_FIELDS, **options}
    ModelConfig(vocab_size=2, hidden_size=2, intermediate_size=2, num_layers=1, num_heads=1,
                num_kv_heads=1, param_dtype=options["dtype"], dtype=options["compute_dtype"],
                remat=options["remat"], attention_block=options["attention_block"],
                attention_impl=options["attention_impl"])
    return options


def load_hf_checkpoint(path: str | os.PathLike, *, dtype: str = "float32",
                       compute_dtype: str | None = None, mesh: Mesh | None = None,
                       rules=sharding.DEFAULT_RULES, seed: int = 0,
                       **config_overrides: Any) -> Transformer:
    """Builds a Transformer from an HF directory; weights stored as `dtype`. Tensors holding NaN
    or inf are refused (ValueError naming them).

    With a `mesh`, each parameter is placed by its logical axes and each process reads only the
    slices it holds. `config_overrides` set seetjax fields (`remat`, `value_head`, ...); a value
    head absent from the directory is freshly initialised from `seed`.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        what = "no config.json in" if path.is_dir() else "no such directory:"
        raise FileNotFoundError(f"not a Hugging Face model directory: {what} {path}")
    hf_config = json.loads((path / "config.json").read_text())
    cfg = config_from_hf(hf_config, param_dtype=dtype, dtype=compute_dtype or dtype,
                         **config_overrides)
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(seed))))
    shardings = ({} if mesh is None else
                 dict(nnx.to_flat_state(sharding.state_shardings(abstract, mesh, rules))))
    tensors = SafetensorsReader(path)
    if (path / VALUE_HEAD_FILE).exists():
        tensors = {**tensors, **SafetensorsReader(path / VALUE_HEAD_FILE)}
    fresh = None
    used = set()
    flat = []
    for key, var in nnx.to_flat_state(abstract):
        name, transposed = hf_name(key)
        shape, want = var.get_value().shape, np.dtype(var.get_value().dtype)
        if name not in tensors:
            if key[0] != "value_head":
                raise KeyError(f"{path}: tensor {name} is missing (needed for "
                               f"{'.'.join(map(str, key))})")
            if fresh is None:
                fresh = nnx.state(Transformer(cfg, rngs=nnx.Rngs(seed)).value_head)
            array = np.asarray(fresh[key[1]].get_value())
        else:
            used.add(name)
            array = tensors[name].T if transposed else tensors[name]
        if array.shape != shape:
            raise ValueError(f"{path}: tensor {name} has shape {array.shape}, expected {shape}")
        target = shardings[key].get_value() if key in shardings else None
        flat.append((key, var.replace(_place(array, want, target))))
    unused = sorted(set(tensors) - used)
    if unused:
        log.warning("%s: %d tensors not used by the model, e.g. %s", path, len(unused), unused[:3])
    _check_finite(path, {hf_name(key)[0]: var.get_value() for key, var in flat})
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


@jax.jit
def _non_finite_counts(arrays: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {name: jax.numpy.sum(~jax.numpy.isfinite(x)) for name, x in arrays.items()
            if jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)}


def _check_finite(path: Path, arrays: dict[str, jax.Array]) -> None:
    """Raises ValueError naming the tensors of `path` holding NaN or inf (one reduction per
    tensor, where it lies): a model that would train and sample garbage and never save."""
    counts = {name: int(np.asarray(n.addressable_data(0)))
              for name, n in _non_finite_counts(arrays).items()}
    bad = [f"tensor {name} has {n} non-finite value{'s' * (n > 1)}"
           for name, n in sorted(counts.items()) if n]
    if bad:
        raise ValueError(f"{path}: {'; '.join(bad[:5])}" + (f" (and {len(bad) - 5} more "
                         "tensors)" if len(bad) > 5 else "") + ": the weights are damaged")


def _place(array: np.ndarray, dtype: np.dtype, target: jax.sharding.Sharding | None) -> jax.Array:
    if target is None:
        return jax.numpy.asarray(np.asarray(array, dtype))
    # Each process materialises only the slices its devices hold.
    return jax.make_array_from_callback(array.shape, target,
                                        lambda index: np.asarray(array[index], dtype))


def save_hf_checkpoint(model: Transformer, path: str | os.PathLike, *, tokenizer: Any = None,
                       dtype: str | None = None, max_shard_bytes: int = 4 << 30) -> Path:
    """Writes `model` (and `tokenizer`, if given) as a directory that
    `transformers.AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained` load.
    Weights are stored as `dtype` (default: the model's parameter dtype); a model with LoRA
    adapters is written with them merged (W + (alpha / r) A B, `merge_lora`). A model holding
    NaN or inf is never written (ValueError naming the tensors)."""
    path = Path(path)
    if has_lora(model):  # adapters folded into the kernels: a plain HF model
        model = merge_lora(model)
    cfg = model.config
    out_dtype = np.dtype(jax.numpy.dtype(dtype or cfg.param_dtype))
    tensors: dict[str, np.ndarray] = {}
    value_head: dict[str, np.ndarray] = {}
    for key, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, transposed = hf_name(key)
        array = np.asarray(_gather(var.get_value())).astype(out_dtype)
        target = value_head if key[0] == "value_head" else tensors
        target[name] = np.ascontiguousarray(array.T if transposed else array)
    damaged = [name for name, array in {**tensors, **value_head}.items()
               if jax.numpy.issubdtype(array.dtype, jax.numpy.inexact)
               and not np.isfinite(array).all()]
    if damaged:
        raise ValueError(f"save_hf_checkpoint: {path} not written: tensor(s) "
                         f"{', '.join(damaged[:5])} hold NaN or inf")
    if jax.process_index() != 0:
        return path
    path.mkdir(parents=True, exist_ok=True)
    config = config_to_hf(cfg.replace(param_dtype=str(out_dtype)))
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    write_sharded(tensors, path, max_shard_bytes)
    if value_head:
        safetensors.numpy.save_file(value_head, path / VALUE_HEAD_FILE)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"


def save_lora_adapter(model: Transformer, path: str | os.PathLike, *, dtype: str | None = None,
                      base_model_name_or_path: str | None = None) -> Path:
    """Writes the LoRA adapters of `model` alone, in PEFT's layout: `adapter_config.json` and
    `adapter_model.safetensors` with `base_model.model.<module>.lora_A.weight` [r, in] and
    `lora_B.weight` [out, r] (torch Linear layout: our A [in, r] and B [r, out] transposed), so
    that PEFT's W + (lora_alpha / r) B A equals the kernel `save_hf_checkpoint` merges. Weights are
    stored as `dtype` (default: the model's parameter dtype)."""
    layers = list(lora_layers(model))
    if not layers:
        raise ValueError("save_lora_adapter: the model has no LoRA adapters")
    out_dtype = np.dtype(jax.numpy.dtype(dtype or model.config.param_dtype))
    tensors: dict[str, np.ndarray] = {}
    ranks, alphas, targets = set(), set(), set()
    for module_path, layer in layers:
        weight_name, _ = hf_name((*module_path, "kernel"))
        module = f"base_model.model.{weight_name.removesuffix('.weight')}"
        a = np.asarray(_gather(layer.lora_a.get_value()))
        b = np.asarray(_gather(layer.lora_b.get_value()))
        tensors[f"{module}.lora_A.weight"] = np.ascontiguousarray(a.T.astype(out_dtype))
        tensors[f"{module}.lora_B.weight"] = np.ascontiguousarray(b.T.astype(out_dtype))
        ranks.add(a.shape[1])
        alphas.add(round(float(layer.scale) * a.shape[1], 6))
        targets.add(str(module_path[-1]))
    if len(ranks) != 1 or len(alphas) != 1:
        raise ValueError(f"save_lora_adapter: adapters of several ranks {sorted(ranks)} or "
                         f"alphas {sorted(alphas)}; PEFT's config holds one of each")
    path = Path(path)
    if jax.process_index() != 0:
        return path
    path.mkdir(parents=True, exist_ok=True)
    alpha = alphas.pop()
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": ranks.pop(),
        "lora_alpha": int(alpha) if alpha.is_integer() else alpha, "lora_dropout": 0.0,
        "target_modules": sorted(targets), "bias": "none", "fan_in_fan_out": False,
        "use_rslora": False, "use_dora": False, "modules_to_save": None,
        "init_lora_weights": True, "inference_mode": True,
        "base_model_name_or_path": base_model_name_or_path}
    (path / ADAPTER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    safetensors.numpy.save_file(tensors, path / ADAPTER_WEIGHTS_FILE, metadata={"format": "pt"})
    return path


def _gather(x: jax.Array) -> np.ndarray:
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils
        return multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(x)
