"""Flax NNX models of the Qwen2/Llama family, Hugging Face checkpoint I/O and tokenizers.

Imports `runtime` only (sharding rules); the embedded default lives in `defaults`.
"""

from seetjax.models.config import PRESETS, ModelConfig, RopeScaling
from seetjax.models.transformer import KVCache, Transformer, positions_from_mask

__all__ = ["PRESETS", "KVCache", "ModelConfig", "RopeScaling", "Transformer", "positions_from_mask"]
