"""A BERT-family text encoder in Flax NNX: BERT / MiniLM, and RoBERTa / XLM-R position ids.

Post-norm transformer encoder (Devlin et al. 2019): word + position + token-type embeddings,
LayerNorm, then layers of bidirectional self-attention and a GELU MLP, each followed by a residual
and LayerNorm. Attribute names follow the Hugging Face modules (`embeddings.word_embeddings`,
`encoder.layer[i].attention...`) so that `hf_encoder` maps checkpoints by name.

A sentence embedding is the mean of the last hidden states over the real (unmasked) tokens, L2
normalised, as sentence-transformers' Pooling(mean) + Normalize modules compute it; the dot product
of two embeddings is then their cosine similarity.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from seetjax.errors import invalid

Array = jax.Array

# Activations by their Hugging Face names: "gelu" is the exact (erf) form, the others tanh.
ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}
# RoBERTa and XLM-R number positions from pad_token_id + 1 and skip padding; BERT counts from 0.
MODEL_TYPES = ("bert", "roberta", "xlm-roberta")


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """The shape of a BERT-family encoder (the fields of its Hugging Face config.json)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    model_type: str = "bert"

    def __post_init__(self):
        if self.model_type not in MODEL_TYPES:
            raise invalid(self, "model_type", self.model_type, f"one of {MODEL_TYPES}")
        if self.hidden_act not in ACTIVATIONS:
            raise invalid(self, "hidden_act", self.hidden_act, f"one of {sorted(ACTIVATIONS)}")
        if self.hidden_size % self.num_heads:
            raise invalid(self, "hidden_size", self.hidden_size,
                          f"must be a multiple of num_heads={self.num_heads}")

    @property
    def max_tokens(self) -> int:
        """The longest sequence the position table covers (RoBERTa's skips pad_token_id + 1)."""
        if self.model_type == "bert":
            return self.max_position_embeddings
        return self.max_position_embeddings - self.pad_token_id - 1


class Embeddings(nnx.Module):
    def __init__(self, cfg: EncoderConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.word_embeddings = nnx.Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs)
        self.position_embeddings = nnx.Embed(cfg.max_position_embeddings, cfg.hidden_size,
                                             rngs=rngs)
        self.token_type_embeddings = nnx.Embed(cfg.type_vocab_size, cfg.hidden_size, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(cfg.hidden_size, epsilon=cfg.layer_norm_eps, rngs=rngs)

    def __call__(self, ids: Array, mask: Array) -> Array:
        if self.cfg.model_type == "bert":
            positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
        else:
            mask = mask.astype(jnp.int32)
            positions = jnp.cumsum(mask, axis=1) * mask + self.cfg.pad_token_id
        x = (self.word_embeddings(ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(jnp.zeros_like(ids)))
        return self.LayerNorm(x)


class Layer(nnx.Module):
    """One post-norm block; names as HF's BertLayer (self-attention's q/k/v flattened here)."""

    def __init__(self, cfg: EncoderConfig, rngs: nnx.Rngs):
        h, f = cfg.hidden_size, cfg.intermediate_size
        self.num_heads = cfg.num_heads
        self.act = cfg.hidden_act
        self.query = nnx.Linear(h, h, rngs=rngs)
        self.key = nnx.Linear(h, h, rngs=rngs)
        self.value = nnx.Linear(h, h, rngs=rngs)
        self.attention_out = nnx.Linear(h, h, rngs=rngs)
        self.attention_norm = nnx.LayerNorm(h, epsilon=cfg.layer_norm_eps, rngs=rngs)
        self.intermediate = nnx.Linear(h, f, rngs=rngs)
        self.output = nnx.Linear(f, h, rngs=rngs)
        self.output_norm = nnx.LayerNorm(h, epsilon=cfg.layer_norm_eps, rngs=rngs)

    def __call__(self, x: Array, mask: Array) -> Array:
        b, t, h = x.shape
        split = lambda y: y.reshape(b, t, self.num_heads, h // self.num_heads)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        # Padded keys get no weight; padded queries still compute (their outputs are pooled away).
        # jax.nn's attention rather than two einsums: on the CPU the einsums' [b, h, q, k]
        # layout ran at ~10 GFLOP/s and took half the encoder's time (docs/performance.md).
        attended = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None, None, :])
        x = self.attention_norm(x + self.attention_out(attended.reshape(b, t, h)))
        return self.output_norm(x + self.output(ACTIVATIONS[self.act](self.intermediate(x))))


class Encoder(nnx.Module):
    """The layer stack under HF's `encoder.layer` name."""

    def __init__(self, cfg: EncoderConfig, rngs: nnx.Rngs):
        self.layer = nnx.List([Layer(cfg, rngs) for _ in range(cfg.num_layers)])

    def __call__(self, x: Array, mask: Array) -> Array:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertEncoder(nnx.Module):
    """ids [B, T] int, mask [B, T] bool (True: a real token) -> hidden states [B, T, H]."""

    def __init__(self, cfg: EncoderConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        self.embeddings = Embeddings(cfg, rngs)
        self.encoder = Encoder(cfg, rngs)

    def __call__(self, ids: Array, mask: Array) -> Array:
        mask = mask.astype(bool)
        return self.encoder(self.embeddings(ids, mask), mask)


def mean_pool(hidden: Array, mask: Array) -> Array:
    """Mean of `hidden` [B, T, H] over the tokens where `mask` [B, T] is set (an all-padding row
    gives zeros, as sentence-transformers' clamp of the count to 1e-9 does)."""
    weights = mask.astype(hidden.dtype)[..., None]
    return (hidden * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1e-9)


def l2_normalize(x: Array, eps: float = 1e-12) -> Array:
    """x / max(||x||_2, eps) along the last axis (torch's F.normalize)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def embed(model: BertEncoder, ids: Array, mask: Array) -> Array:
    """Sentence embeddings [B, H]: mean pooling then L2 normalisation (Reimers & Gurevych 2019)."""
    return l2_normalize(mean_pool(model(ids, mask), mask))
