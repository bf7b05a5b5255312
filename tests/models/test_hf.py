"""Hugging Face checkpoint parity: transformers -> seetjax logits and back."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from seetjax.models import positions_from_mask
from seetjax.models.config import ModelConfig, RopeScaling
from seetjax.models.hf import (
    VALUE_HEAD_FILE,
    config_from_hf,
    config_to_hf,
    load_hf_checkpoint,
    save_hf_checkpoint,
)
from seetjax.runtime import sharding

ROOT = Path(__file__).resolve().parents[2]


def torch_logits(model_dir, tokens, mask):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    positions = np.asarray(positions_from_mask(jnp.asarray(mask)))
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                    position_ids=torch.tensor(positions))
    return out.logits.float().numpy()


def our_logits(model, tokens, mask):
    mask = jnp.asarray(mask)
    logits, _ = model(jnp.asarray(tokens), positions_from_mask(mask), mask)
    return np.asarray(logits)


def max_diff_on_tokens(a, b, mask):
    return float(np.abs(a - b)[mask.astype(bool)].max())


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_load_matches_transformers_logits(kind, request, padded_batch):
    model_dir = request.getfixturevalue(f"hf_{kind}_dir")
    tokens, mask = padded_batch
    model = load_hf_checkpoint(model_dir)
    assert model.config.model_type == kind
    ours, theirs = our_logits(model, tokens, mask), torch_logits(model_dir, tokens, mask)
    diff = max_diff_on_tokens(ours, theirs, mask)
    assert diff <= 1e-4


def test_llama3_rope_scaling_and_biases_are_read(hf_llama_dir):
    cfg = load_hf_checkpoint(hf_llama_dir).config
    assert cfg.rope_scaling is not None and cfg.rope_scaling.factor == 8.0
    assert cfg.rope_scaling.original_max_position_embeddings == 64
    assert cfg.qkv_bias and cfg.o_bias and not cfg.tie_word_embeddings


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_round_trip_through_transformers(kind, request, padded_batch, tmp_path):
    tokens, mask = padded_batch
    model = load_hf_checkpoint(request.getfixturevalue(f"hf_{kind}_dir"))
    save_hf_checkpoint(model, tmp_path)
    assert max_diff_on_tokens(our_logits(model, tokens, mask), torch_logits(tmp_path, tokens, mask),
                              mask) <= 1e-4
    again = load_hf_checkpoint(tmp_path)
    for (k1, v1), (k2, v2) in zip(nnx.to_flat_state(nnx.state(model)),
                                  nnx.to_flat_state(nnx.state(again))):
        assert k1 == k2
        np.testing.assert_array_equal(v1.get_value(), v2.get_value())


def test_sharded_files_round_trip(hf_llama_dir, padded_batch, tmp_path):
    tokens, mask = padded_batch
    model = load_hf_checkpoint(hf_llama_dir)
    save_hf_checkpoint(model, tmp_path, max_shard_bytes=64 * 1024)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 2 and all((tmp_path / s).exists() for s in shards)
    assert not (tmp_path / "model.safetensors").exists()
    assert max_diff_on_tokens(our_logits(load_hf_checkpoint(tmp_path), tokens, mask),
                              torch_logits(tmp_path, tokens, mask), mask) <= 1e-4


def test_bf16_storage(hf_qwen2_dir, tmp_path):
    model = load_hf_checkpoint(hf_qwen2_dir, dtype="bfloat16")
    kernel = model.layers[0].mlp.up_proj.kernel.get_value()
    assert kernel.dtype == jnp.bfloat16 and model.config.compute_dtype == jnp.bfloat16
    f32 = load_hf_checkpoint(hf_qwen2_dir).layers[0].mlp.up_proj.kernel.get_value()
    np.testing.assert_array_equal(np.asarray(kernel), np.asarray(f32.astype(jnp.bfloat16)))
    save_hf_checkpoint(model, tmp_path)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    assert reloaded.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"


def test_value_head_is_saved_beside_and_restored(hf_qwen2_dir, tmp_path, padded_batch):
    tokens, mask = padded_batch
    model = load_hf_checkpoint(hf_qwen2_dir, value_head=True, seed=3)
    hidden, _ = model.hidden_states(jnp.asarray(tokens), positions_from_mask(jnp.asarray(mask)),
                                    jnp.asarray(mask))
    values = model.values(hidden)
    assert values.shape == tokens.shape and values.dtype == jnp.float32
    save_hf_checkpoint(model, tmp_path)
    assert (tmp_path / VALUE_HEAD_FILE).exists()
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path)  # HF ignores the extra file
    again = load_hf_checkpoint(tmp_path, value_head=True, seed=99)
    np.testing.assert_array_equal(again.value_head.kernel.get_value(),
                                  model.value_head.kernel.get_value())
    with pytest.raises(ValueError, match="value head"):
        load_hf_checkpoint(tmp_path).values(hidden)


def test_missing_tensor_is_named(hf_qwen2_dir, tmp_path):
    import shutil

    import safetensors.numpy
    shutil.copytree(hf_qwen2_dir, tmp_path, dirs_exist_ok=True)
    tensors = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.1.mlp.down_proj.weight"]
    safetensors.numpy.save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(KeyError, match="model.layers.1.mlp.down_proj.weight"):
        load_hf_checkpoint(tmp_path)


def test_unsupported_configs_fail_with_the_field_named():
    with pytest.raises(ValueError, match="model_type='mistral'"):
        config_from_hf({"model_type": "mistral"})
    with pytest.raises(ValueError, match="rope_type='yarn'"):
        config_from_hf({"model_type": "qwen2", "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}})
    with pytest.raises(ValueError, match="rope_type='linear'"):
        config_from_hf({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}})
    with pytest.raises(ValueError, match="use_sliding_window"):
        config_from_hf({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64})
    with pytest.raises(ValueError, match="hidden_act"):
        config_from_hf({"model_type": "llama", "hidden_act": "gelu"})


# config.json files as published (transformers 4.x: top-level rope_theta, rope_scaling) and as
# transformers 5 writes them (rope_parameters), plus the fewest fields either class accepts.
HUB_CONFIGS = {
    "Qwen2.5-0.5B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896,
        "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
        "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
        "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936},
    "Qwen2-1.5B": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 1536,
        "initializer_range": 0.02, "intermediate_size": 8960, "max_position_embeddings": 131072,
        "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 12,
        "num_hidden_layers": 28, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936},
    "Qwen2.5-7B, written by transformers 5": {
        "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "dtype": "bfloat16",
        "eos_token_id": 151643, "head_dim": 128, "hidden_act": "silu", "hidden_size": 3584,
        "intermediate_size": 18944, "layer_types": ["full_attention"] * 28,
        "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2",
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "pad_token_id": None, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
        "vocab_size": 152064},
    "Llama-3.2-1B-Instruct": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
        "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256},
    "Llama-2-7b-hf": {
        "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000},
    "Llama-3.1-8B, rope_scaling with `type` and no original length": {
        "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": 128001,
        "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0},
        "rope_theta": 500000.0, "vocab_size": 128256},
    "LLaMA-7B (first conversion: no num_key_value_heads, no max_position_embeddings)": {
        "architectures": ["LLaMAForCausalLM"], "bos_token_id": 0, "eos_token_id": 1,
        "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008,
        "initializer_range": 0.02, "max_sequence_length": 2048, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "rms_norm_eps": 1e-06,
        "torch_dtype": "float16", "use_cache": True, "vocab_size": 32000},
    "qwen2, every field default": {"model_type": "qwen2"},
    "llama, every field default": {"model_type": "llama"},
}


def config_read_by_transformers(hf_config: dict) -> ModelConfig:
    """The ModelConfig of transformers' own reading of `hf_config` (its config classes fill in
    defaults and standardise RoPE; head_dim and biases as its Qwen2 / Llama modules take them)."""
    hf = transformers.AutoConfig.for_model(**copy.deepcopy(hf_config))  # it edits nested dicts
    rope = hf.rope_parameters
    scaling = None if rope["rope_type"] == "default" else RopeScaling(
        factor=rope["factor"], low_freq_factor=rope["low_freq_factor"],
        high_freq_factor=rope["high_freq_factor"],
        original_max_position_embeddings=rope["original_max_position_embeddings"])
    qwen2 = hf.model_type == "qwen2"
    return ModelConfig(
        model_type=hf.model_type, vocab_size=hf.vocab_size, hidden_size=hf.hidden_size,
        intermediate_size=hf.intermediate_size, num_layers=hf.num_hidden_layers,
        num_heads=hf.num_attention_heads, num_kv_heads=hf.num_key_value_heads,
        head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
        rope_theta=rope["rope_theta"], rope_scaling=scaling, rms_norm_eps=hf.rms_norm_eps,
        qkv_bias=qwen2 or hf.attention_bias, o_bias=not qwen2 and hf.attention_bias,
        mlp_bias=not qwen2 and hf.mlp_bias, tie_word_embeddings=hf.tie_word_embeddings,
        max_position_embeddings=hf.max_position_embeddings,
        initializer_range=hf.initializer_range, bos_token_id=hf.bos_token_id,
        eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id)


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_config_json_is_read_as_transformers_reads_it(name):
    """Our parser and transformers' config classes agree on every ModelConfig field, and the
    config.json we write for it reads back the same in both."""
    ours = config_from_hf(HUB_CONFIGS[name])
    assert ours == config_read_by_transformers(HUB_CONFIGS[name])
    written = json.loads(json.dumps(config_to_hf(ours)))
    assert config_from_hf(written) == ours == config_read_by_transformers(written)


@pytest.mark.usefixtures("embedded_dir")  # built here first, not inside the subprocess
def test_loading_and_exporting_import_neither_torch_nor_transformers_configs(tmp_path):
    """transformers' configuration module imports torch whenever it is installed (seconds in
    every launch): reading and writing a checkpoint, tokenizer included, stays clear of it."""
    code = (
        "import sys\n"
        "from seetjax.defaults.embedded import embedded_model_dir\n"
        "from seetjax.models.hf import load_hf_checkpoint, save_hf_checkpoint\n"
        "from seetjax.models.tokenizer import Tokenizer\n"
        "path = embedded_model_dir()\n"
        f"save_hf_checkpoint(load_hf_checkpoint(path), {str(tmp_path)!r},\n"
        "                   tokenizer=Tokenizer.from_pretrained(path))\n"
        "print(sorted(m for m in ('torch', 'transformers.configuration_utils') "
        "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[]"
    assert (tmp_path / "config.json").exists() and (tmp_path / "tokenizer.json").exists()


def test_sharded_placement_on_a_mesh(hf_llama_dir, padded_batch):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    tokens, mask = padded_batch
    mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
    model = load_hf_checkpoint(hf_llama_dir, mesh=mesh)
    up = model.layers[0].mlp.up_proj.kernel.get_value()  # [embed, mlp] -> (fsdp, tensor)
    assert up.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    embed = model.embed_tokens.embedding.get_value()  # [vocab, embed] -> (tensor, fsdp)
    assert embed.sharding.spec == jax.sharding.PartitionSpec("tensor", "fsdp")
    assert len(up.addressable_shards) == 8 and up.addressable_shards[0].data.shape == (32, 48)
    reference = our_logits(load_hf_checkpoint(hf_llama_dir), tokens, mask)
    with jax.set_mesh(mesh):
        sharded = our_logits(model, tokens, mask)
    assert max_diff_on_tokens(sharded, reference, mask) <= 1e-5


def test_a_lora_model_exports_merged_and_transformers_loads_it(hf_qwen2_dir, padded_batch,
                                                                tmp_path):
    """A LoRA-trained model (adapters moved off zero) is written with its adapters merged: the
    directory loads in transformers and gives the adapted model's logits."""
    from seetjax.models.lora import LoRAConfig, add_lora

    tokens, mask = padded_batch
    model = add_lora(load_hf_checkpoint(hf_qwen2_dir), LoRAConfig(rank=4, alpha=8.0),
                     nnx.Rngs(0))
    graphdef, adapters, rest = nnx.split(model, nnx.LoRAParam, ...)
    moved = nnx.merge(graphdef, jax.tree.map(lambda x: x + 0.02, adapters), rest)
    base = our_logits(load_hf_checkpoint(hf_qwen2_dir), tokens, mask)
    adapted = our_logits(moved, tokens, mask)
    assert max_diff_on_tokens(adapted, base, mask) > 1e-2  # the adapters matter
    save_hf_checkpoint(moved, tmp_path)
    assert max_diff_on_tokens(torch_logits(tmp_path, tokens, mask), adapted, mask) <= 1e-4


def test_a_missing_model_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no such directory: {tmp_path / 'nope'}"):
        load_hf_checkpoint(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json in"):
        load_hf_checkpoint(tmp_path)


def test_a_lora_adapter_is_saved_in_peft_layout(hf_qwen2_dir, padded_batch, tmp_path):
    """`save_lora_adapter`: PEFT's files and names; base + (lora_alpha / r) B A (PEFT's merge, in
    torch layout) is the kernel the merged export holds, and that export reloads here with the
    unmerged LoRA model's logits."""
    import safetensors.numpy

    from seetjax.models.hf import save_lora_adapter
    from seetjax.models.lora import LoRAConfig, add_lora

    tokens, mask = padded_batch
    model = add_lora(load_hf_checkpoint(hf_qwen2_dir),
                     LoRAConfig(rank=4, alpha=8.0, targets=("q_proj", "down_proj")), nnx.Rngs(0))
    graphdef, adapters, rest = nnx.split(model, nnx.LoRAParam, ...)
    moved = nnx.merge(graphdef, jax.tree.map(lambda x: x + 0.02, adapters), rest)
    save_lora_adapter(moved, tmp_path / "adapter", base_model_name_or_path=hf_qwen2_dir)
    save_hf_checkpoint(moved, tmp_path / "merged")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8)
    assert config["target_modules"] == ["down_proj", "q_proj"]
    adapter = safetensors.numpy.load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert len(adapter) == 2 * 2 * 2  # 2 layers x 2 modules x (A, B)
    base = safetensors.numpy.load_file(f"{hf_qwen2_dir}/model.safetensors")
    merged = safetensors.numpy.load_file(tmp_path / "merged" / "model.safetensors")
    for module in ("model.layers.1.self_attn.q_proj", "model.layers.0.mlp.down_proj"):
        a = adapter[f"base_model.model.{module}.lora_A.weight"]  # [r, in]
        b = adapter[f"base_model.model.{module}.lora_B.weight"]  # [out, r]
        weight = base[f"{module}.weight"]
        assert a.shape == (4, weight.shape[1]) and b.shape == (weight.shape[0], 4)
        np.testing.assert_allclose(weight + 2.0 * (b @ a), merged[f"{module}.weight"], atol=1e-6)
    adapted = our_logits(moved, tokens, mask)
    reloaded = our_logits(load_hf_checkpoint(tmp_path / "merged"), tokens, mask)
    assert max_diff_on_tokens(reloaded, adapted, mask) <= 1e-5


def test_a_model_without_adapters_has_no_adapter_to_save(hf_qwen2_dir, tmp_path):
    from seetjax.models.hf import save_lora_adapter

    with pytest.raises(ValueError, match="no LoRA adapters"):
        save_lora_adapter(load_hf_checkpoint(hf_qwen2_dir), tmp_path)
