"""The embedded default model: built offline, deterministically, cached on disk.

A byte-level BPE tokenizer trained on BFCL multi-turn text (user questions, function docs,
ground-truth calls) and on generated tasks' text of the training vocabulary (`generated_corpus`;
the held-out test vocabulary is never seen) with our ChatML-style chat template, and a tiny
randomly initialised Qwen2-architecture model, written together as one Hugging Face directory.
Nothing is fetched from a hub; the same seed and spec rebuild the same bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

from flax import nnx

from seetjax.envs import generated
from seetjax.envs.bfcl import data as bfcl_data
from seetjax.envs.generated import generate_tasks
from seetjax.models.config import ModelConfig
from seetjax.models.hf import save_hf_checkpoint
from seetjax.models.tokenizer import train_bpe_tokenizer
from seetjax.models.transformer import Transformer
from seetjax.runtime.cache import cached_directory

_BUILDER_VERSION = 3


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


# Generated tasks in the tokenizer's corpus: per category, from a stream no run trains on.
CORPUS_TASKS_PER_CATEGORY = 100
CORPUS_STREAM_SEED = 7919


def generated_corpus() -> list[str]:
    """Generated-task text of the training vocabulary (questions, ground-truth calls), fixed
    order: the tokenizer then encodes the generated tasks as compactly as BFCL's."""
    texts = []
    for category in bfcl_data.CATEGORIES:
        for task in generate_tasks(CORPUS_TASKS_PER_CATEGORY, seed=CORPUS_STREAM_SEED,
                                   split="train", category=category):
            texts.extend(m["content"] for turn in task.turns for m in turn)
            texts.extend(call for turn in task.ground_truth_text for call in turn)
    return texts


# The house redesign (2026-11-27) moved `seetjax.envs.bfcl_data` to `seetjax.envs.bfcl.data`: a
# new name in the generator's imports, not a change to what it generates, so the digest reads
# the old name and the models cached before the move stay valid.
_MOVED = ((b"seetjax.envs.bfcl.data", b"seetjax.envs.bfcl_data"),)


def generator_digest() -> str:
    """A digest of the generator's source: the corpus (and so the tokenizer) changes with it."""
    digest = hashlib.sha256()
    for path in sorted(Path(generated.__file__).parent.rglob("*.py")):
        source = path.read_bytes()
        for new, old in _MOVED:
            source = source.replace(new, old)
        digest.update(source)
    return digest.hexdigest()


def build_embedded_model(out_dir: str | os.PathLike, spec: EmbeddedSpec | None = None) -> Path:
    """Trains the tokenizer, initialises the model from `spec.seed`, writes both to `out_dir`."""
    spec = spec or EmbeddedSpec()
    tokenizer = train_bpe_tokenizer(bfcl_corpus() + generated_corpus(), spec.vocab_size)
    if len(tokenizer) != spec.vocab_size:
        raise RuntimeError(f"BPE training gave {len(tokenizer)} tokens, wanted {spec.vocab_size}")
    hf = tokenizer.hf
    cfg = spec.model_config(bos=hf.bos_token_id, eos=hf.eos_token_id, pad=tokenizer.pad_id)
    model = Transformer(cfg, rngs=nnx.Rngs(spec.seed))
    return save_hf_checkpoint(model, out_dir, tokenizer=tokenizer)


def embedded_model_dir(spec: EmbeddedSpec | None = None,
                       cache_dir: str | os.PathLike | None = None) -> Path:
    """The embedded default's directory, built on first use (`cached_directory`)."""
    spec = spec or EmbeddedSpec()
    key = [_BUILDER_VERSION, dataclasses.asdict(spec), metadata.version("bfcl-eval"),
           metadata.version("tokenizers"), generator_digest()]
    return cached_directory("embedded", key, lambda tmp: build_embedded_model(tmp, spec),
                            cache_dir)
