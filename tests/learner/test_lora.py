"""LoRA: adapters alone train and carry optimizer state; the base is the reference policy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from learner_testlib import flat_arrays, make_learner, rl_batch, tiny_model

from seetjax.learner import learner_config
from seetjax.models.lora import LoRAConfig, add_lora, merge_lora


def test_adapters_start_as_identity_and_merge_exactly():
    model = tiny_model(num_layers=1)
    tokens = jnp.arange(12)[None] % 256
    args = (tokens, jnp.arange(12)[None], jnp.ones((1, 12), jnp.int32))
    base = model(*args)[0]
    adapted = add_lora(nnx.clone(model), LoRAConfig(rank=4, targets=("q_proj", "up_proj")),
                       nnx.Rngs(1))
    np.testing.assert_array_equal(adapted(*args)[0], base)
    graphdef, adapters, rest = nnx.split(adapted, nnx.LoRAParam, ...)
    moved = nnx.merge(graphdef, jax.tree.map(lambda x: x + 0.05, adapters), rest)
    assert float(jnp.max(jnp.abs(moved(*args)[0] - base))) > 1e-3
    np.testing.assert_allclose(merge_lora(moved)(*args)[0], moved(*args)[0], atol=1e-5)
    assert {k[-1] for k, _ in nnx.to_flat_state(nnx.state(merge_lora(moved)))} == {
        "kernel", "bias", "scale", "embedding"}


def test_lora_trains_adapters_only_with_the_base_as_reference():
    model = tiny_model(num_layers=1)
    spec = {"algorithm": "grpo", "lora": {"rank": 4}, "optimizer": {"learning_rate": 1e-2}}
    learner, state = make_learner(model, spec)
    trainable = {k[-1] for k, _ in nnx.to_flat_state(state.params)}
    assert trainable == {"lora_a", "lora_b"} and state.reference is None
    # optimizer moments exist for the adapters alone
    moment_leaves = sum(len(jax.tree.leaves(s.mu)) for s in jax.tree.leaves(
        state.opt_state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu"))
    assert moment_leaves == len(jax.tree.leaves(state.params))
    frozen_before = flat_arrays(state.frozen)
    batch = rl_batch(seed=5)
    state, first = learner.update(state, batch)
    assert abs(first["kl"]) < 1e-6  # the adapted policy starts at the base (the reference)
    state, second = learner.update(state, batch)
    assert second["kl"] > 1e-7
    frozen_after = flat_arrays(state.frozen)
    assert all(np.array_equal(frozen_before[k], frozen_after[k]) for k in frozen_before)


@pytest.mark.parametrize("dtype,atol", [("float32", 1e-6), ("bfloat16", 1e-2)])
def test_merge_stores_the_parameter_dtype_and_matches_the_forward_math(dtype, atol):
    """Merged kernel = W + (alpha / r) A B summed in float32, stored as the kernel's dtype."""
    model = add_lora(tiny_model(num_layers=1, param_dtype=dtype),
                     LoRAConfig(rank=2, alpha=3.0, targets=("v_proj",)), nnx.Rngs(2))
    graphdef, adapters, rest = nnx.split(model, nnx.LoRAParam, ...)
    moved = nnx.merge(graphdef, jax.tree.map(lambda x: x + 0.1, adapters), rest)
    layer = moved.layers[0].self_attn.v_proj
    want = (np.asarray(layer.kernel[...], np.float64) + 1.5 * (
        np.asarray(layer.lora_a[...], np.float64) @ np.asarray(layer.lora_b[...], np.float64)))
    merged = merge_lora(moved).layers[0].self_attn.v_proj.kernel[...]
    assert merged.dtype == jnp.dtype(dtype)
    np.testing.assert_allclose(np.asarray(merged, np.float64), want, atol=atol)


@pytest.mark.parametrize("fields,message", [
    ({"rank": -2}, "LoRAConfig.rank=-2"), ({"rank": 4, "alpha": -1.0}, "LoRAConfig.alpha"),
    ({"rank": 4, "dropout": 1.0}, r"LoRAConfig.dropout=1.0: must be in \[0, 1\)"),
    ({"rank": 4, "dropout": 0.1}, "LoRAConfig.dropout=0.1: LoRA dropout is not implemented"),
    ({"rank": 4, "targets": "q_proj,qkv"}, "LoRAConfig.targets"),
    ({"rank": 4, "targets": ""}, "LoRAConfig.targets"),
    ({"rank": 0, "alpha": 0.0}, "LoRAConfig.alpha"),  # off, yet still checked
    ({"rank": 4, "drop": 0.1}, "LoRAConfig.drop=0.1: no such field")])
def test_bad_lora_fields_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        learner_config({"algorithm": "sft", "lora": fields})


def test_lora_fields_from_a_run_config():
    cfg = learner_config({"algorithm": "sft", "lora": {"rank": 8, "alpha": 32.0, "dropout": 0.0,
                                                       "targets": "q_proj, v_proj"}})
    assert cfg.lora == LoRAConfig(rank=8, alpha=32.0, targets=("q_proj", "v_proj"))
    assert learner_config({"algorithm": "sft", "lora": {"rank": 0}}).lora is None
