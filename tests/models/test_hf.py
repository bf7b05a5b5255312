"""Hugging Face checkpoint parity: transformers -> seetjax logits and back."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from seetjax import sharding
from seetjax.models import positions_from_mask
from seetjax.models.hf import (
    VALUE_HEAD_FILE,
    config_from_hf,
    load_hf_checkpoint,
    save_hf_checkpoint,
)


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
    with pytest.raises(ValueError, match="rope_type='yarn'"):
        config_from_hf(transformers.Qwen2Config(
            rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}))
    with pytest.raises(ValueError, match="use_sliding_window"):
        config_from_hf(transformers.Qwen2Config(use_sliding_window=True, sliding_window=64))
    with pytest.raises(ValueError, match="hidden_act"):
        config_from_hf(transformers.LlamaConfig(hidden_act="gelu"))


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
