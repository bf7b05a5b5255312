"""The train state: pure pytrees from `nnx.split`, so every jitted function of the learner is pure.

Full fine-tuning trains every `nnx.Param`; with LoRA only the adapters (`nnx.LoRAParam`) and a
value head train and the rest is `frozen`. A frozen `reference` copy of the initial parameters is
kept when a loss needs reference log-probs (with LoRA the base model, adapters zeroed, is the
reference and nothing is copied).

Precision (mixed-precision training with master weights, Micikevicius et al. 2018): whatever the
storage dtype of the loaded model (`ModelConfig.param_dtype`), the trainable parameters of the
state are float32 masters and the optimizer state is float32, so small updates are not rounded
away (at lr 1e-6 a bf16 AdamW step changed 1.5% of the weights, an f32 one 96%). Forward and
backward passes still compute in `ModelConfig.dtype` (every layer casts its weights to it); the
frozen part (a LoRA base) and the reference copy stay in the storage dtype; the sampler gets the
masters cast to the storage dtype (`Learner.sampling_params`). Memory per trainable parameter:
4 B master + 8 B AdamW moments, plus 2 B for the sampler's bf16 copy when the storage dtype is
bf16 (~14 B, and 2 B per reference parameter), or 12 B in f32 (the sampler then shares the
masters, no copy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from seetjax.models.lora import add_lora
from seetjax.models.transformer import Transformer

Array = jax.Array

# What LoRA training updates besides the adapters: the value head is new, so it trains in full.
LORA_TRAINABLE = nnx.Any(nnx.LoRAParam, nnx.PathContains("value_head"))


@struct.dataclass
class TrainState:
    """step: optimizer updates applied (int32 scalar); params: the trainable state; opt_state: the
    optimizer's state of `params` only; frozen: the rest of the model (empty for full
    fine-tuning); reference: frozen reference parameters or None; rng: uint32 key data for the
    caller's sampling (checkpointed with the state); skipped: updates skipped as non-finite."""

    step: Array
    params: nnx.State
    opt_state: optax.OptState
    frozen: nnx.State
    reference: nnx.State | None
    rng: Array
    skipped: Array

    def key(self) -> Array:
        return jax.random.wrap_key_data(self.rng)


def split_model(model: Transformer, lora: bool) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """(graphdef, trainable, frozen) of a model (adapters already added when `lora`)."""
    return nnx.split(model, LORA_TRAINABLE if lora else nnx.Param, ...)


def prepare_model(model: Transformer, lora_config, seed: int) -> Transformer:
    """The model the learner trains: `model` itself, or a copy with LoRA adapters added."""
    if lora_config is None:
        return model
    return add_lora(nnx.clone(model), lora_config, nnx.Rngs(seed))


def as_masters(params: nnx.State) -> nnx.State:
    """The trainable parameters as float32 masters (non-float leaves unchanged)."""
    return jax.tree.map(
        lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)


def cast_like(params: nnx.State, dtype: jnp.dtype) -> nnx.State:
    """Float leaves of `params` in `dtype` (the model's storage dtype), the rest unchanged."""
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)


def new_train_state(params: nnx.State, frozen: nnx.State, optimizer: optax.GradientTransformation,
                    keep_reference: bool, seed: int) -> TrainState:
    """Initial state from the model's trainable `params` (any storage dtype): float32 masters
    and optimizer state; the reference keeps the storage dtype (call under jit with output
    shardings to place it on a mesh)."""
    # A separate copy: the state's buffers are donated to each update, the reference must survive.
    reference = jax.tree.map(jnp.copy, params) if keep_reference else None
    masters = as_masters(params)
    return TrainState(step=jnp.zeros((), jnp.int32), params=masters,
                      opt_state=optimizer.init(masters), frozen=frozen, reference=reference,
                      rng=jax.random.key_data(jax.random.key(seed)),
                      skipped=jnp.zeros((), jnp.int32))
