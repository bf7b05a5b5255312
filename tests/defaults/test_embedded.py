"""The embedded default model: offline, deterministic, a complete HF directory."""

import filecmp
import os

import numpy as np
import transformers

from seetjax.defaults.embedded import EmbeddedSpec, build_embedded_model, embedded_model_dir
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.tokenizer import Tokenizer
from tests.models.test_hf import max_diff_on_tokens, our_logits, torch_logits


def test_rebuild_from_the_seed_gives_the_same_bytes(embedded_dir, tmp_path):
    build_embedded_model(tmp_path, EmbeddedSpec())
    names = sorted(os.listdir(embedded_dir))
    assert names == sorted(os.listdir(tmp_path))
    expected = {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"}
    assert expected <= set(names)
    for name in names:
        assert filecmp.cmp(embedded_dir / name, tmp_path / name, shallow=False), name


def test_cached_directory_is_reused(embedded_dir):
    before = os.stat(embedded_dir / "model.safetensors").st_mtime_ns
    assert embedded_model_dir() == embedded_dir
    assert os.stat(embedded_dir / "model.safetensors").st_mtime_ns == before


def test_loads_in_transformers_and_seetjax_alike(embedded_dir):
    tokenizer = Tokenizer.from_pretrained(embedded_dir)
    auto = transformers.AutoTokenizer.from_pretrained(embedded_dir)
    messages = [{"role": "user", "content": "cd into documents"}]
    ids = tokenizer.chat_ids(messages, add_generation_prompt=True)
    assert ids == auto.encode(auto.apply_chat_template(messages, tokenize=False,
                                                       add_generation_prompt=True),
                              add_special_tokens=False)
    model = load_hf_checkpoint(embedded_dir)
    cfg = model.config
    assert cfg.model_type == "qwen2"
    assert cfg.vocab_size == len(tokenizer) == EmbeddedSpec().vocab_size
    assert cfg.eos_token_id in tokenizer.stop_ids and cfg.pad_token_id == tokenizer.pad_id
    tokens = np.array([ids, ids[:3] + [tokenizer.pad_id] * (len(ids) - 3)])
    mask = np.ones_like(tokens)
    mask[1, 3:] = 0
    assert max_diff_on_tokens(our_logits(model, tokens, mask),
                              torch_logits(embedded_dir, tokens, mask), mask) <= 1e-4


def test_a_different_spec_is_a_different_cache_entry(embedded_dir, tmp_path):
    small = EmbeddedSpec(vocab_size=512, hidden_size=32, intermediate_size=48, num_layers=1)
    path = embedded_model_dir(small, cache_dir=tmp_path)
    assert path.parent == tmp_path and path.name != embedded_dir.name
    assert load_hf_checkpoint(path).config.num_layers == 1
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind
