"""Flax NNX models of the Qwen2/Llama family, Hugging Face checkpoint I/O and tokenizers."""

from seetjax.models.config import PRESETS, ModelConfig, RopeScaling
from seetjax.models.transformer import KVCache, Transformer, positions_from_mask

__all__ = ["PRESETS", "KVCache", "ModelConfig", "RopeScaling", "Transformer", "positions_from_mask"]
