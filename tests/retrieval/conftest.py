"""Encoders shared by the retrieval tests: all-MiniLM-L6-v2 (loaded once per session) and a tiny
random BERT saved by transformers (torch is test-only) with MiniLM's tokenizer."""

import json
import shutil

import pytest

from seetjax.retrieval.hf_encoder import minilm_dir
from seetjax.retrieval.sentence import SentenceEncoder


@pytest.fixture(scope="session")
def minilm() -> SentenceEncoder:
    return SentenceEncoder.from_dir(minilm_dir())


def save_random_encoder(out_dir, model_type: str = "bert", **overrides):
    """A random encoder of `model_type` written by transformers (safetensors), with MiniLM's
    tokenizer and a 64-token sentence-transformers length; returns the directory."""
    import torch
    import transformers

    torch.manual_seed(0)
    fields = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=130, **overrides)
    config = (transformers.BertConfig(**fields) if model_type == "bert"
              else transformers.XLMRobertaConfig(pad_token_id=1, **fields))
    model = transformers.AutoModel.from_config(config, add_pooling_layer=False).eval()
    with torch.no_grad():  # non-zero biases and LayerNorm shifts, so a mixed-up name shows
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1)
    model.save_pretrained(out_dir)
    shutil.copy(minilm_dir() / "tokenizer.json", out_dir / "tokenizer.json")
    (out_dir / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64}))
    return out_dir


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return save_random_encoder(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny(tiny_dir) -> SentenceEncoder:
    return SentenceEncoder.from_dir(tiny_dir)
