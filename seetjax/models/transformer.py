"""Decoder-only transformer of the Qwen2/Qwen2.5 and Llama-3 family, in Flax NNX.

Pre-norm blocks: RMSNorm (Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021) with
optional Llama-3 frequency scaling, grouped-query attention (Ainslie et al. 2023), SwiGLU MLP
(Shazeer 2020). Attribute names follow the Hugging Face modules so checkpoint mapping is by name.

Masking is explicit: every call takes token positions and an `attention_mask` of segment ids
(0 = padding; equal non-zero ids attend to each other causally), which covers left or right padding
and packed sequences alike. With a `KVCache`, each row's new tokens are written right after the
tokens it already holds and attend to all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from seetjax.errors import invalid
from seetjax.models.attention import cached_attention, causal_blocked_attention
from seetjax.models.config import ModelConfig
from seetjax.runtime import sharding

Array = jax.Array


@struct.dataclass
class KVCache:
    """Keys [batch, kv_heads, head_dim, slots] and values [batch, kv_heads, slots, head_dim] of
    every layer. Heads come before slots so attention reads each head's slots contiguously (~3x
    faster on CPU than slots first), and keys are stored transposed so both attention matmuls
    are plain (rows x contraction) @ (contraction x columns) products: scoring one new query
    against the keys took ~3x less time that way than against [slots, head_dim] keys
    (docs/performance.md).

    Row b holds its tokens in slots [0, lengths[b]); new tokens are written right after them, so
    rows of different lengths never waste slots on each other's padding.
    """

    keys: tuple[Array, ...]
    values: tuple[Array, ...]
    lengths: Array  # [batch] int32

    AXES = ("batch", "kv_heads", None, None)  # logical axes of each key/value array
    KEY_SLOT_AXIS, VALUE_SLOT_AXIS = 3, 2

    @classmethod
    def zeros(cls, cfg: ModelConfig, batch: int, slots: int,
              mesh: jax.sharding.Mesh | None = None) -> KVCache:
        """An empty cache; with a `mesh`, created already sharded (rows over the batch axes,
        KV heads over the tensor axis), never materialised on one device."""
        key_shape = (batch, cfg.num_kv_heads, cfg.head_dim, slots)
        value_shape = (batch, cfg.num_kv_heads, slots, cfg.head_dim)
        row_sharding = None
        if mesh is not None:
            row_sharding = sharding.named(mesh, ("batch",), (batch,))

        def zeros(shape) -> tuple[Array, ...]:
            device = None if mesh is None else sharding.named(mesh, cls.AXES, shape)
            return tuple(jnp.zeros(shape, cfg.compute_dtype, device=device)
                         for _ in range(cfg.num_layers))

        return cls(keys=zeros(key_shape), values=zeros(value_shape),
                   lengths=jnp.zeros((batch,), jnp.int32, device=row_sharding))

    @property
    def slots(self) -> int:
        return self.values[0].shape[self.VALUE_SLOT_AXIS]

    def resize(self, slots: int) -> KVCache:
        """The cache with `slots` slots per row: zero slots appended, or trailing slots cut (only
        slots no row uses may be cut)."""
        def fit(x: Array, axis: int) -> Array:
            have = x.shape[axis]
            if slots >= have:
                return jnp.pad(x, [(0, slots - have) if a == axis else (0, 0)
                                   for a in range(x.ndim)])
            return jax.lax.slice_in_dim(x, 0, slots, axis=axis)
        return self.replace(keys=tuple(fit(k, self.KEY_SLOT_AXIS) for k in self.keys),
                            values=tuple(fit(v, self.VALUE_SLOT_AXIS) for v in self.values))


@functools.lru_cache(maxsize=64)
def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Inverse RoPE frequencies, with Llama-3 scaling when `cfg.rope_scaling` is set."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    s = cfg.rope_scaling
    if s is not None:
        wavelen = 2 * np.pi / inv_freq
        low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
        high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
        smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
            s.high_freq_factor - s.low_freq_factor)
        scaled = np.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = np.where(medium, (1 - smooth) * scaled / s.factor + smooth * scaled, scaled)
    return inv_freq.astype(np.float32)


def apply_rope(x: Array, positions: Array, inv_freq: np.ndarray) -> Array:
    """Rotates [batch, seq, heads, head_dim] by `positions` (half-split layout, as rotate_half)."""
    freqs = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, D/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate([-x2, x1], axis=-1) * sin


def _param(rngs: nnx.Rngs, shape: Sequence[int], axes: Sequence[str | None], cfg: ModelConfig,
           zero: bool = False) -> nnx.Param:
    if zero:
        value = jnp.zeros(shape, cfg.weight_dtype)
    else:
        value = cfg.initializer_range * jax.random.normal(rngs.params(), shape, cfg.weight_dtype)
    return nnx.Param(value, axes=tuple(axes))


class Dense(nnx.Module):
    """y = x @ kernel (+ bias), computed in the config's compute dtype. kernel: [in, out]."""

    def __init__(self, in_features: int, out_features: int, axes: tuple[str | None, str | None],
                 cfg: ModelConfig, rngs: nnx.Rngs, use_bias: bool = False):
        self.kernel = _param(rngs, (in_features, out_features), axes, cfg)
        self.bias = _param(rngs, (out_features,), axes[1:], cfg, zero=True) if use_bias else None
        self.dtype = cfg.compute_dtype

    def __call__(self, x: Array) -> Array:
        # One 2-D product over all leading axes: as a [B, T, in] x [in, out] dot_general, XLA:CPU
        # transposed an operand of the kernel's gradient into a fresh copy for every projection
        # (~11% of a training step at 8 x 512; docs/performance.md).
        flat = x.reshape(-1, x.shape[-1]).astype(self.dtype)
        y = jnp.dot(flat, self.kernel[...].astype(self.dtype)).reshape(*x.shape[:-1], -1)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class RMSNorm(nnx.Module):
    """x / rms(x) * scale, normalised in f32."""

    def __init__(self, dim: int, cfg: ModelConfig):
        self.scale = nnx.Param(jnp.ones((dim,), cfg.weight_dtype), axes=("norm",))
        self.eps = cfg.rms_norm_eps

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x.dtype) * normed.astype(x.dtype)


class Embed(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.embedding = _param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), cfg)
        self.dtype = cfg.compute_dtype

    def __call__(self, tokens: Array) -> Array:
        return jnp.take(self.embedding[...], tokens, axis=0).astype(self.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = Dense(h, cfg.num_heads * d, ("embed", "heads"), cfg, rngs, cfg.qkv_bias)
        self.k_proj = Dense(h, cfg.num_kv_heads * d, ("embed", "kv_heads"), cfg, rngs, cfg.qkv_bias)
        self.v_proj = Dense(h, cfg.num_kv_heads * d, ("embed", "kv_heads"), cfg, rngs, cfg.qkv_bias)
        self.o_proj = Dense(cfg.num_heads * d, h, ("heads", "embed"), cfg, rngs, cfg.o_bias)
        self.config = cfg

    def __call__(self, x: Array, positions: Array, mask: Array,
                 kv: tuple[Array, Array, Array] | None = None) -> tuple[Array, tuple[Array, Array]]:
        """x: [B, T, H]; mask: [B, T, W] bool. With `kv` = (keys, values, lengths) row b's new keys
        and values are written from slot lengths[b] on and attention runs over the cache's first
        W slots (the window `Transformer.hidden_states` was given: all slots by default)."""
        cfg = self.config
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, cfg.num_heads, cfg.head_dim)
        k = self.k_proj(x).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        v = self.v_proj(x).reshape(b, t, cfg.num_kv_heads, cfg.head_dim)
        inv_freq = rope_inv_freq(cfg)
        q = apply_rope(q, positions, inv_freq)
        k = apply_rope(k, positions, inv_freq)
        if kv is None and uses_cudnn_attention(cfg):
            out = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None],
                                               implementation="cudnn")
        elif kv is None:
            out = causal_blocked_attention(q, k, v, mask, cfg.attention_block)
        else:
            cache_k, cache_v, lengths = kv
            # [B, T, K, D] -> keys [B, K, D, T], values [B, K, T, D]
            k = _write_rows(cache_k, k.transpose(0, 2, 3, 1), lengths, KVCache.KEY_SLOT_AXIS)
            v = _write_rows(cache_v, v.transpose(0, 2, 1, 3), lengths, KVCache.VALUE_SLOT_AXIS)
            w = mask.shape[-1]
            out = cached_attention(q, k[..., :w], v[:, :, :w], mask)
        return self.o_proj(out.reshape(b, t, -1)), (k, v)


def uses_cudnn_attention(cfg: ModelConfig) -> bool:
    """Whether full-sequence attention (training, prefill) runs cuDNN's fused flash kernel
    (`jax.nn.dot_product_attention(implementation="cudnn")`): on a GPU backend with bf16 or f16
    compute and a head_dim it supports, under `attention_impl` "auto" or "cudnn"; "cudnn" where
    it cannot run is a ValueError naming the field, raised when the model is traced."""
    if cfg.attention_impl == "xla":
        return False
    runs = (jax.default_backend() == "gpu" and cfg.dtype in ("bfloat16", "float16")
            and cfg.head_dim % 8 == 0 and cfg.head_dim <= 128)
    if cfg.attention_impl == "cudnn" and not runs:
        raise invalid(
            cfg, "attention_impl", "cudnn", "needs a GPU, dtype bfloat16 or float16 and a "
            f"head_dim multiple of 8 up to 128 (backend {jax.default_backend()}, dtype "
            f"{cfg.dtype}, head_dim {cfg.head_dim}); use 'auto' or 'xla'")
    return runs


def _write_rows(cache: Array, new: Array, starts: Array, slot_axis: int) -> Array:
    """Row b of `new` (laid out as the cache, with T slots) written into row b of `cache` from
    slot starts[b] on, for every row b."""
    def write(c, n, s):
        start = [0] * c.ndim
        start[slot_axis - 1] = s
        return jax.lax.dynamic_update_slice(c, n, start)
    return jax.vmap(write)(cache, new.astype(cache.dtype), starts)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        h, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Dense(h, f, ("embed", "mlp"), cfg, rngs, cfg.mlp_bias)
        self.up_proj = Dense(h, f, ("embed", "mlp"), cfg, rngs, cfg.mlp_bias)
        self.down_proj = Dense(f, h, ("mlp", "embed"), cfg, rngs, cfg.mlp_bias)

    def __call__(self, x: Array) -> Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg)
        self.self_attn = Attention(cfg, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x: Array, positions: Array, mask: Array,
                 kv: tuple[Array, Array, Array] | None = None) -> tuple[Array, tuple[Array, Array]]:
        attn, new_kv = self.self_attn(self.input_layernorm(x), positions, mask, kv)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), new_kv


_REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


def rematerialised(layer: DecoderLayer, remat: str):
    """(x, positions, mask) -> the layer's output, under `jax.checkpoint` with the `remat` policy
    (Chen et al. 2016): its activations are recomputed in the backward pass, not stored.

    A pure function of the layer's state, split here and merged inside the checkpoint: the layer
    computes without mutating itself, so nothing is written back. `nnx.remat` would write back
    into the layer's Variables, which fails (TraceContextError) when they belong to an outer
    trace, as where the learner merges a model from states its `lax.map`/`lax.scan` body
    closes over (KL reference, LoRA's frozen base)."""
    graphdef, state = nnx.split(layer)

    def pure(state: nnx.State, x: Array, positions: Array, mask: Array) -> Array:
        return nnx.merge(graphdef, state)(x, positions, mask)[0]

    return functools.partial(jax.checkpoint(pure, policy=_REMAT_POLICIES[remat]), state)


def segment_mask(attention_mask: Array, segment_ends: Array | None = None) -> Array:
    """[B, T] segment ids (0 = padding) -> [B, T, T] causal same-segment mask. With
    `segment_ends` [B, T], segments nest (`seetjax.batch.PrefixTree`): token j is visible from
    token i when j <= i and ids[j] <= ids[i] < ends[j]."""
    seg = attention_mask
    t = seg.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    if segment_ends is None:
        visible = seg[:, :, None] == seg[:, None, :]
    else:
        visible = ((seg[:, None, :] <= seg[:, :, None])
                   & (seg[:, :, None] < segment_ends[:, None, :]))
    return causal[None] & visible & (seg[:, None, :] != 0)


def cache_mask(lengths: Array, length: int, slots: int) -> Array:
    """[B, T, S]: new token t of row b (in slot lengths[b] + t) sees slots up to its own."""
    query_slot = lengths[:, None] + jnp.arange(length)[None, :]
    return jnp.arange(slots)[None, None, :] <= query_slot[:, :, None]


class Transformer(nnx.Module):
    """Causal LM: tokens -> f32 logits, optionally a scalar value head on the same trunk (PPO)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        self.embed_tokens = Embed(cfg, rngs)
        self.layers = nnx.List([DecoderLayer(cfg, rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg)
        self.lm_head = (None if cfg.tie_word_embeddings else
                        Dense(cfg.hidden_size, cfg.vocab_size, ("embed", "vocab"), cfg, rngs))
        self.value_head = (Dense(cfg.hidden_size, 1, ("embed", None), cfg, rngs, use_bias=True)
                           if cfg.value_head else None)

    def hidden_states(self, tokens: Array, positions: Array, attention_mask: Array,
                      cache: KVCache | None = None, *, window: int = 0,
                      segment_ends: Array | None = None) -> tuple[Array, KVCache | None]:
        """Final-normed hidden states [B, T, H].

        Without a cache `attention_mask` holds segment ids, nested ones with `segment_ends`
        (`segment_mask`: packed rows sharing their prefixes). With one it marks which of the new
        tokens are real; they must come first in each row (right padding), and each row's cache
        length grows by their count. `window` (static; 0: all the cache's slots) bounds the slots
        attention reads to the first `window`: the caller's promise that every row's new tokens
        land below it (lengths + T <= window). Slots past every row's tokens are masked anyway,
        but their scores cost as much as real ones (docs/performance.md#attention-window).
        """
        x = self.embed_tokens(tokens)
        if cache is None:
            mask = segment_mask(attention_mask, segment_ends)
        else:
            slots = min(window, cache.slots) if window else cache.slots
            mask = cache_mask(cache.lengths, tokens.shape[1], slots)
        keys, values = [], []
        for i, layer in enumerate(self.layers):
            if cache is not None:
                kv = (cache.keys[i], cache.values[i], cache.lengths)
                x, (k, v) = layer(x, positions, mask, kv)
                keys.append(k)
                values.append(v)
            elif self.config.remat == "none":
                x, _ = layer(x, positions, mask)
            else:
                x = rematerialised(layer, self.config.remat)(x, positions, mask)
        x = self.norm(x)
        if cache is not None:
            count = (attention_mask != 0).sum(axis=1).astype(jnp.int32)
            cache = KVCache(keys=tuple(keys), values=tuple(values), lengths=cache.lengths + count)
        return x, cache

    def logits(self, hidden: Array) -> Array:
        """LM head in the compute dtype with f32 accumulation and output."""
        w = (self.embed_tokens.embedding[...].T if self.lm_head is None
             else self.lm_head.kernel[...])
        return jnp.einsum("...h,hv->...v", hidden, w.astype(hidden.dtype),
                          preferred_element_type=jnp.float32)

    def values(self, hidden: Array) -> Array:
        """Per-token scalar values [B, T] (f32) from the value head."""
        if self.value_head is None:
            raise ValueError("this model has no value head: set ModelConfig.value_head=True")
        return self.value_head(hidden)[..., 0].astype(jnp.float32)

    def __call__(self, tokens: Array, positions: Array, attention_mask: Array,
                 cache: KVCache | None = None) -> tuple[Array, KVCache | None]:
        hidden, cache = self.hidden_states(tokens, positions, attention_mask, cache)
        return self.logits(hidden), cache


def positions_from_mask(attention_mask: Array) -> Array:
    """Positions 0, 1, ... counted over the non-padding tokens of each segment."""
    seg = jnp.asarray(attention_mask)
    valid = (seg != 0).astype(jnp.int32)
    starts = jnp.concatenate([jnp.ones_like(seg[:, :1], bool), seg[:, 1:] != seg[:, :-1]], axis=1)
    count = jnp.cumsum(valid, axis=1)
    # count just before each segment start, carried forward to every token of that segment
    offset = jax.lax.cummax(jnp.where(starts, count - valid, 0), axis=1)
    return jnp.maximum(count - offset - 1, 0)
