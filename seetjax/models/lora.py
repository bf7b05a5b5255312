"""LoRA adapters (Hu et al. 2021) for the Dense projections of a `Transformer`.

`add_lora` swaps each targeted `Dense` for a `LoRADense` that keeps the very same `kernel`/`bias`
variables (so parameter paths and Hugging Face names do not change) and adds two `nnx.LoRAParam`s,
A [in, r] (random) and B [r, out] (zeros): y = x W + b + (alpha / r) (x A) B. The model output is
unchanged until B moves. Split with `nnx.split(model, nnx.LoRAParam, ...)`, the adapters are a
state of their own: the learner trains (and keeps optimizer moments for) them alone, and the
frozen base with the adapters zeroed is the reference policy. `merge_lora` folds them back into
plain kernels; `save_hf_checkpoint` does so (and `save_lora_adapter` writes the adapters
alone, in PEFT's layout).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import nnx

from seetjax.errors import invalid
from seetjax.models.transformer import Dense, Transformer

ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """rank: r; alpha: the scale numerator (update scaled by alpha / r); targets: attribute names
    of the Dense layers to adapt; dropout: adapter-input dropout, which `LoRADense` does not
    implement: only 0 is accepted."""

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ALL_PROJECTIONS
    dropout: float = 0.0

    def __post_init__(self):
        if self.rank <= 0 or int(self.rank) != self.rank:
            raise invalid(self, "rank", self.rank, "must be an integer > 0")
        if self.alpha <= 0:
            raise invalid(self, "alpha", self.alpha, "must be > 0")
        if not 0 <= self.dropout < 1:
            raise invalid(self, "dropout", self.dropout, "must be in [0, 1)")
        if self.dropout:
            raise invalid(self, "dropout", self.dropout, "LoRA dropout is not "
                             "implemented (the adapters see their input undropped); set it to 0")
        unknown = set(self.targets) - set(ALL_PROJECTIONS)
        if not self.targets or unknown:
            raise invalid(self, "targets", self.targets, "must be a non-empty subset of "
                          f"{ALL_PROJECTIONS}")
        object.__setattr__(self, "targets", tuple(self.targets))


class LoRADense(Dense):
    """A Dense layer plus a trainable low-rank update."""

    def __init__(self, base: Dense, rank: int, alpha: float, rngs: nnx.Rngs):
        # The base layer's own variables: same paths, same arrays.
        self.kernel, self.bias, self.dtype = base.kernel, base.bias, base.dtype
        fan_in, fan_out = base.kernel.get_value().shape
        in_axis, out_axis = base.kernel.get_metadata()["axes"]
        dtype = base.kernel.get_value().dtype
        a = jax.random.normal(rngs.params(), (fan_in, rank), dtype) / jnp.sqrt(fan_in).astype(dtype)
        self.lora_a = nnx.LoRAParam(a, axes=(in_axis, None))
        self.lora_b = nnx.LoRAParam(jnp.zeros((rank, fan_out), dtype), axes=(None, out_axis))
        self.scale = alpha / rank

    def __call__(self, x: jax.Array) -> jax.Array:
        low_rank = jnp.dot(jnp.dot(x.astype(self.dtype), self.lora_a[...].astype(self.dtype)),
                           self.lora_b[...].astype(self.dtype))
        return super().__call__(x) + self.scale * low_rank


def _targets(model: Transformer, names: tuple[str, ...]):
    """(parent module, attribute name) of every Dense whose attribute name is in `names`."""
    for _, module in nnx.iter_modules(model):
        for name in names:
            child = getattr(module, name, None)
            if isinstance(child, Dense):
                yield module, name


def add_lora(model: Transformer, config: LoRAConfig, rngs: nnx.Rngs) -> Transformer:
    """Adds adapters to `model` in place (and returns it)."""
    targets = list(_targets(model, config.targets))
    for parent, name in targets:
        base = getattr(parent, name)
        if isinstance(base, LoRADense):
            raise ValueError(f"{name} already has a LoRA adapter")
        setattr(parent, name, LoRADense(base, config.rank, config.alpha, rngs))
    return model


def lora_layers(model: Transformer):
    """(state path, LoRADense) of every adapted layer of `model`, in state order."""
    for path, module in nnx.iter_modules(model):
        if isinstance(module, LoRADense):
            yield tuple(path), module


def has_lora(model: Transformer) -> bool:
    return any(True for _ in lora_layers(model))


def lora_delta(layer: LoRADense) -> jax.Array:
    """(alpha / r) A B in float32, the kernel-layout [in, out] update that `LoRADense.__call__`
    adds: x W + scale (x A) B = x (W + scale A B)."""
    a = layer.lora_a[...].astype(jnp.float32)
    b = layer.lora_b[...].astype(jnp.float32)
    return layer.scale * jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)


def merge_lora(model: Transformer) -> Transformer:
    """A plain Transformer (no adapters) whose kernels are W + (alpha / r) A B (summed in float32,
    stored in the model's parameter dtype); `model` is left untouched."""
    graphdef, plain = nnx.split(nnx.eval_shape(lambda: Transformer(model.config,
                                                                    rngs=nnx.Rngs(0))))
    source = dict(nnx.to_flat_state(nnx.state(model)))
    merged = []
    for path, var in nnx.to_flat_state(plain):
        value = source[path].get_value()
        layer = functools.reduce(lambda m, k: m[k] if isinstance(k, int) else getattr(m, k),
                                 path[:-1], model)
        if path[-1] == "kernel" and isinstance(layer, LoRADense):
            storage = var.get_value().dtype  # the config's parameter dtype
            value = (value.astype(jnp.float32) + lora_delta(layer)).astype(storage)
        merged.append((path, var.replace(value)))
    return nnx.merge(graphdef, nnx.from_flat_state(merged))
