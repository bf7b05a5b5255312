"""The embedded default model: built offline, deterministically, cached on disk.

A byte-level BPE tokenizer trained on BFCL multi-turn text (user questions, function docs,
ground-truth calls) with our ChatML-style chat template, and a tiny randomly initialised
Qwen2-architecture model, written together as one Hugging Face directory. Nothing is fetched from a
hub; the same seed and spec rebuild the same bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from flax import nnx

from seetjax.cache import cache_root
from seetjax.envs import bfcl_data
from seetjax.models.config import ModelConfig
from seetjax.models.hf import save_hf_checkpoint
from seetjax.models.tokenizer import train_bpe_tokenizer
from seetjax.models.transformer import Transformer

_BUILDER_VERSION = 1


@dataclasses.dataclass(frozen=True)
class EmbeddedSpec:
    """What the embedded default is made of; any change gives a new cache entry."""

    seed: int = 0
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 704
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 8192

    def model_config(self, *, bos: int | None, eos: int, pad: int) -> ModelConfig:
        return ModelConfig(
            model_type="qwen2", qkv_bias=True, tie_word_embeddings=True, rope_theta=1_000_000.0,
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_layers=self.num_layers,
            num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
            max_position_embeddings=self.max_position_embeddings, bos_token_id=bos,
            eos_token_id=eos, pad_token_id=pad)


def bfcl_corpus() -> list[str]:
    """BFCL multi-turn text in a fixed order: questions, ground-truth calls, JSON function docs."""
    texts = []
    for category in bfcl_data.CATEGORIES:
        for entry in bfcl_data.load_category(category):
            texts.extend(m["content"] for turn in entry["question"] for m in turn)
            texts.extend(call for turn in entry["ground_truth"] for call in turn)
    for class_name in bfcl_data.MULTI_TURN_CLASSES:
        texts.extend(json.dumps(doc) for doc in bfcl_data.load_func_docs(class_name))
    return texts


def build_embedded_model(out_dir: str | os.PathLike, spec: EmbeddedSpec | None = None) -> Path:
    """Trains the tokenizer, initialises the model from `spec.seed`, writes both to `out_dir`."""
    spec = spec or EmbeddedSpec()
    tokenizer = train_bpe_tokenizer(bfcl_corpus(), spec.vocab_size)
    if len(tokenizer) != spec.vocab_size:
        raise RuntimeError(f"BPE training gave {len(tokenizer)} tokens, wanted {spec.vocab_size}")
    hf = tokenizer.hf
    cfg = spec.model_config(bos=hf.bos_token_id, eos=hf.eos_token_id, pad=tokenizer.pad_id)
    model = Transformer(cfg, rngs=nnx.Rngs(spec.seed))
    return save_hf_checkpoint(model, out_dir, tokenizer=tokenizer)


def embedded_model_dir(spec: EmbeddedSpec | None = None,
                       cache_dir: str | os.PathLike | None = None) -> Path:
    """The embedded default's directory, built on first use (atomically: concurrent callers,
    e.g. test workers, never see a half-written directory)."""
    spec = spec or EmbeddedSpec()
    key = json.dumps([_BUILDER_VERSION, dataclasses.asdict(spec), metadata.version("bfcl-eval"),
                      metadata.version("tokenizers")])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    final = root / f"embedded-{digest}"
    if (final / "config.json").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        build_embedded_model(tmp, spec)
        os.rename(tmp, final)
    except OSError:
        if not (final / "config.json").exists():  # not a lost race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
