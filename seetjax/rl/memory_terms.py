"""The arithmetic of `seetjax.rl.memory_plan`: per-device bytes of the learner's states (exact,
from their shapes and the rule table on an abstract mesh) and of the transients of one update and
one sampler call (counts per element, fitted to XLA's compiled memory; see memory_plan's
docstring)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AbstractMesh

from seetjax.learner.config import LearnerConfig, OptimizerConfig
from seetjax.learner.optimizer import make_optimizer
from seetjax.learner.state import new_train_state, prepare_model, split_model
from seetjax.models.config import ModelConfig
from seetjax.models.lora import LoRAConfig
from seetjax.models.transformer import Transformer
from seetjax.runtime.sharding import logical_to_spec

# Fitted by least squares to `temp_size_in_bytes` of the compiled update at nine tiny f32 shapes
# (layers, hidden, FFN, vocabulary, rows, width, attention block, LM-head chunk varied): per layer,
# hidden-sized and FFN-sized arrays per token (compute dtype), f32 score blocks per head; f32
# logits per head position; bytes per (query, key) pair of a row and query head: one layer's
# attention temporaries over all its query blocks at once, which XLA:CPU keeps (the blocked
# attention's forward and backward alone measured 7.3-10.4 bytes per pair and head over 2-8
# heads, blocks of 128-256, 1,024-2,048 tokens). Held-out f32 shapes, 4 and 12 heads, agree
# within 10% (tests/rl/test_memory_plan.py).
ACT_HIDDEN, ACT_FFN, ACT_SCORES, ACT_LOGITS, ACT_ATTENTION = 13.5, 5.0, 1.0, 2.0, 7.75
# the Sampler's defaults
SAMPLER_MIN_SLOTS, SAMPLER_MIN_STEPS, _SAMPLER_MIN_CHUNK, _SAMPLER_CHUNK = 128, 16, 16, 512
_SAMPLER_SCORE_BYTES = 1 << 28  # Sampler.max_score_bytes: a prompt chunk's scores at most


def _shard_bytes(shape: Sequence[int], dtype: Any, axes: Sequence[str | None] | None,
                 mesh: AbstractMesh, rules) -> int:
    """Bytes of one device's shard of an array with logical `axes` (None: replicated)."""
    elements = 1
    spec = logical_to_spec(axes, shape, mesh, rules) if axes else [None] * len(shape)
    for dim, entry in zip(shape, spec):
        names = () if entry is None else (entry,) if isinstance(entry, str) else entry
        elements *= dim // math.prod(mesh.shape[n] for n in names)
    return elements * jnp.dtype(dtype).itemsize


def tree_bytes(tree: Any, mesh: AbstractMesh, rules) -> int:
    """Per-device bytes of a pytree of abstract arrays and `nnx.Variable`s, the variables placed
    by their logical axes, the rest replicated (as `learner.sharding.tree_shardings` does)."""
    total = 0
    for leaf in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nnx.Variable)):
        axes = None
        if isinstance(leaf, nnx.Variable):
            axes = leaf.get_metadata().get("axes")
            leaf = leaf.get_value()
        total += _shard_bytes(leaf.shape, leaf.dtype, axes, mesh, rules)
    return total


def abstract_state(cfg: ModelConfig, learner: LearnerConfig) -> Any:
    """The learner's initial TrainState as shapes (what `create_learner` builds)."""
    # Only the shapes matter: plans that differ elsewhere (remat, micro-batches) share one.
    shape = cfg.replace(remat="none", attention_block=0, attention_impl="xla")
    return _abstract_state(shape, learner.lora, learner.optimizer,
                           learner.needs_reference and learner.lora is None)


@functools.lru_cache(maxsize=8)
def _abstract_state(cfg: ModelConfig, lora: LoRAConfig | None, optimizer: OptimizerConfig,
                    keep_reference: bool) -> Any:
    model = nnx.eval_shape(lambda: prepare_model(Transformer(cfg, rngs=nnx.Rngs(0)), lora, 0))
    _, params, frozen = split_model(model, lora is not None)
    init = lambda p, f: new_train_state(p, f, make_optimizer(optimizer),  # noqa: E731
                                        keep_reference, 0)
    return jax.eval_shape(init, params, frozen)


def uses_fused_attention(cfg: ModelConfig, backend: str) -> bool:
    """Whether training attention runs cuDNN's fused kernel on `backend` (no score blocks):
    `models.transformer.uses_cudnn_attention`'s rule for a backend other than this process's."""
    return (backend == "gpu" and cfg.attention_impl in ("auto", "cudnn")
            and cfg.dtype in ("bfloat16", "float16") and cfg.head_dim % 8 == 0
            and cfg.head_dim <= 128)


def per_device(n: int, ways: int) -> int:
    """Per-device share of a dimension `n` over `ways` devices (replicated when they do not
    divide it, as the rule table does)."""
    return n // ways if ways > 1 and n % ways == 0 else n


def activation_bytes(cfg: ModelConfig, rows: int, width: int, tensor: int, head_chunk: int,
                     fused_attention: bool, remat: str) -> int:
    """One device's activations of a forward + backward pass over `rows` x `width` tokens under
    `remat` (module docstring)."""
    c = jnp.dtype(cfg.dtype).itemsize
    tokens = rows * width
    heads = per_device(cfg.num_heads, tensor)
    hidden = tokens * cfg.hidden_size * c
    ffn = tokens * per_device(cfg.intermediate_size, tensor) * c
    block = cfg.attention_block if 0 < cfg.attention_block < width else width
    scores = 0 if fused_attention else rows * heads * width * block * 4
    layer = ACT_HIDDEN * hidden + ACT_FFN * ffn + ACT_SCORES * scores
    if remat == "none":
        layers = cfg.num_layers * layer
    elif remat == "full":  # each layer's input, then one layer recomputed at a time
        layers = cfg.num_layers * hidden + layer
    else:  # "dots": every matmul's output kept, the rest recomputed one layer at a time
        dots = tokens * c * ((heads + 2 * per_device(cfg.num_kv_heads, tensor)) * cfg.head_dim
                             + 2 * cfg.hidden_size + 3 * per_device(cfg.intermediate_size, tensor))
        layers = cfg.num_layers * dots + layer
    positions = rows * (min(head_chunk, width) if head_chunk else width)
    logits = ACT_LOGITS * positions * per_device(cfg.vocab_size, tensor) * 4
    # a fused kernel keeps the boolean mask alone
    pairs = rows * width * width
    attention = pairs if fused_attention else ACT_ATTENTION * heads * pairs
    return int(layers + logits + attention)


def prefill_bytes(cfg: ModelConfig, rows: int, chunk: int, slots: int, tensor: int) -> int:
    """One device's work of a prompt chunk of `chunk` tokens per row against `slots` cache
    slots: the f32 scores and their softmax, one layer's FFN activations."""
    scores = rows * per_device(cfg.num_heads, tensor) * chunk * slots * 4
    ffn = rows * chunk * per_device(cfg.intermediate_size, tensor) * jnp.dtype(cfg.dtype).itemsize
    return 2 * scores + ffn


def decode_bytes(cfg: ModelConfig, rows: int, slots: int, tensor: int) -> int:
    """One device's work of a decode step: the next token's logits and its sampling
    distribution (f32), one layer's scores against every slot and their softmax."""
    scores = rows * per_device(cfg.num_heads, tensor) * slots * 4
    return 2 * rows * per_device(cfg.vocab_size, tensor) * 4 + 2 * scores


def prefill_chunk(cfg: ModelConfig, rows: int, slots: int) -> int:
    """The sampler's longest prompt chunk at `rows` (all devices) and `slots`: the largest power
    of two up to its max_chunk (and the cache) whose scores fit max_score_bytes
    (`Sampler._chunk_size`)."""
    chunk = min(_SAMPLER_CHUNK, slots)
    while chunk > _SAMPLER_MIN_CHUNK and rows * cfg.num_heads * 4 * chunk * slots > \
            _SAMPLER_SCORE_BYTES:
        chunk //= 2
    return chunk
