"""Model configuration for the Qwen2/Qwen2.5 and Llama-3 decoder family.

A frozen, hashable dataclass: it is part of the model's static structure (the NNX graphdef), so
two models with equal configs share compiled functions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from seetjax.errors import invalid

MODEL_TYPES = ("qwen2", "llama")
REMAT_POLICIES = ("none", "full", "dots")
DTYPES = ("float32", "bfloat16", "float16")
# "auto": cuDNN's fused (flash) attention where it runs (a GPU, bf16/f16 compute, head_dim a
# multiple of 8 up to 128), else XLA's in query blocks; "xla" / "cudnn": that one always.
ATTENTION_IMPLS = ("auto", "xla", "cudnn")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """Llama-3 RoPE frequency scaling (the `llama3` rope type of Llama 3.1+)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a decoder-only transformer.

    `param_dtype` is how weights are stored, `dtype` the compute dtype of activations and matmuls
    (bf16 on accelerators, f32 on CPU, where bf16 is slower). Logits and softmax are always f32.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    model_type: str = "qwen2"
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    initializer_range: float = 0.02
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: str = "none"
    # Full-sequence (training) attention in causal query blocks of this many tokens: block i
    # attends only to keys before its end, so the masked upper triangle is never computed (about
    # half the score FLOPs and memory of long rows). 0: one block.
    attention_block: int = 256
    attention_impl: str = "auto"
    value_head: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None

    def __post_init__(self):
        if not self.head_dim:
            if self.hidden_size % self.num_heads:
                raise invalid(self, "hidden_size", self.hidden_size, f"not divisible by num_heads="
                              f"{self.num_heads}; set head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent field."""
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise invalid(self, name, getattr(self, name), "must be positive")
        if self.num_heads % self.num_kv_heads:
            raise invalid(self, "num_heads", self.num_heads, "must be a multiple of "
                          f"num_kv_heads={self.num_kv_heads} (grouped-query attention)")
        if self.head_dim % 2:
            raise invalid(self, "head_dim", self.head_dim, "must be even for RoPE")
        if self.model_type not in MODEL_TYPES:
            raise invalid(self, "model_type", self.model_type, f"one of {MODEL_TYPES}")
        if self.remat not in REMAT_POLICIES:
            raise invalid(self, "remat", self.remat, f"one of {REMAT_POLICIES}")
        if self.attention_block < 0:
            raise invalid(self, "attention_block", self.attention_block, "must be >= 0")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise invalid(self, "attention_impl", self.attention_impl, f"one of {ATTENTION_IMPLS}")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in DTYPES:
                raise invalid(self, name, getattr(self, name), f"one of {DTYPES}")

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    @property
    def weight_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.param_dtype)

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameter count (embeddings included, value head excluded)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * d * (self.num_heads * 2 + self.num_kv_heads * 2)
        attn += d * (self.num_heads + 2 * self.num_kv_heads) if self.qkv_bias else 0
        attn += h if self.o_bias else 0
        mlp = 3 * h * self.intermediate_size
        mlp += 2 * self.intermediate_size + h if self.mlp_bias else 0
        layer = attn + mlp + 2 * h
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + embed + h

    def flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token at context `seq_len`: 2N + 4*L*H*Q*T (PaLM, Chowdhery et al.
        2022, appendix B; training is 3x this). N counts matmul weights: the input embedding is a
        lookup, so an untied embedding table is left out."""
        matmul_params = self.num_params() - self.vocab_size * self.hidden_size * (
            0 if self.tie_word_embeddings else 1)
        attention = 4 * self.num_layers * self.num_heads * self.head_dim * seq_len
        return 2.0 * matmul_params + attention


def _qwen2(**kw: Any) -> ModelConfig:
    return ModelConfig(model_type="qwen2", qkv_bias=True, rope_theta=1_000_000.0,
                       rms_norm_eps=1e-6, **kw)


def _llama3(**kw: Any) -> ModelConfig:
    return ModelConfig(model_type="llama", rope_theta=500_000.0, rms_norm_eps=1e-5,
                       max_position_embeddings=131072, **kw)


# Shapes of public checkpoints, for random-weight benchmarks and sanity checks of loaded configs.
PRESETS: dict[str, ModelConfig] = {
    "qwen2.5-0.5b": _qwen2(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                           num_layers=24, num_heads=14, num_kv_heads=2, tie_word_embeddings=True),
    "qwen2.5-1.5b": _qwen2(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                           num_layers=28, num_heads=12, num_kv_heads=2, tie_word_embeddings=True),
    "qwen2.5-7b": _qwen2(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                         num_layers=28, num_heads=28, num_kv_heads=4),
    "llama-3.2-1b": _llama3(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                            num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64,
                            tie_word_embeddings=True, rope_scaling=RopeScaling(factor=32.0)),
    "llama-3.1-8b": _llama3(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                            num_layers=32, num_heads=32, num_kv_heads=8,
                            rope_scaling=RopeScaling(factor=8.0)),
    # The tiny Qwen2 shape the PyTorch peer figures in FACTS.md were measured on.
    "tiny-qwen2": _qwen2(vocab_size=8192, hidden_size=256, intermediate_size=704, num_layers=4,
                         num_heads=4, num_kv_heads=2, tie_word_embeddings=True),
}
