"""The train state: pure pytrees from `nnx.split`, so every jitted function of the learner is pure.

Full fine-tuning trains every `nnx.Param`; with LoRA only the adapters (`nnx.LoRAParam`) and a
value head train and the rest is `frozen`. A frozen `reference` copy of the initial parameters is
kept when a loss needs reference log-probs (with LoRA the base model, adapters zeroed, is the
reference and nothing is copied).
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


def new_train_state(params: nnx.State, frozen: nnx.State, optimizer: optax.GradientTransformation,
                    keep_reference: bool, seed: int) -> TrainState:
    """Initial state (call under jit with output shardings to place it on a mesh)."""
    # A separate copy: the state's buffers are donated to each update, the reference must survive.
    reference = jax.tree.map(jnp.copy, params) if keep_reference else None
    return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                      opt_state=optimizer.init(params), frozen=frozen, reference=reference,
                      rng=jax.random.key_data(jax.random.key(seed)),
                      skipped=jnp.zeros((), jnp.int32))
