"""The Flax encoder against sentence-transformers and transformers (torch, test-only)."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from seetjax.retrieval.encoder import embed
from seetjax.retrieval.hf_encoder import load_encoder, minilm_dir, read_config, save_encoder
from seetjax.retrieval.sentence import SentenceEncoder, pad_batch
from tests.retrieval.conftest import save_random_encoder

# Lengths from 3 to ~150 tokens: one padded batch where most rows are mostly padding.
TEXTS = ["Find the area of a triangle with sides 3, 4 and 5.", "hi",
         "Book a table for two at an Italian restaurant in Berlin tomorrow at 7pm. " * 8,
         "get_weather.by_city(city: string): the forecast for a city"]


@pytest.fixture(scope="module")
def sentence_transformer():
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(str(minilm_dir()), device="cpu")


def test_minilm_matches_sentence_transformers_on_a_padded_batch(minilm, sentence_transformer):
    ours = minilm.encode(TEXTS, batch_size=len(TEXTS))
    theirs = sentence_transformer.encode(TEXTS, batch_size=len(TEXTS))
    assert ours.shape == (4, 384)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def torch_embeddings(model_dir, ids, mask):
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long)).last_hidden_state
    weights = torch.tensor(mask, dtype=torch.float32)[..., None]
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


@pytest.mark.parametrize("model_type", ["bert", "xlm-roberta"])
def test_random_layouts_match_transformers(tmp_path, model_type):
    model_dir = save_random_encoder(tmp_path, model_type)
    pad = read_config(model_dir).pad_token_id
    rng = np.random.default_rng(0)
    lengths = [9, 3, 16]
    ids = np.full((3, 16), pad, np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(5, 30000, n)
    mask = np.arange(16)[None] < np.array(lengths)[:, None]
    ours = np.asarray(embed(load_encoder(model_dir), jnp.asarray(ids), jnp.asarray(mask)))
    np.testing.assert_allclose(ours, torch_embeddings(model_dir, ids, mask), atol=1e-5)


def test_save_encoder_round_trips_and_loads_in_sentence_transformers(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = save_encoder(minilm.model, minilm.source, tmp_path / "copy")
    assert (out / "modules.json").is_file() and (out / "1_Pooling" / "config.json").is_file()
    ours = minilm.encode(TEXTS[:2])
    np.testing.assert_array_equal(SentenceEncoder.from_dir(out).encode(TEXTS[:2]), ours)
    reloaded = SentenceTransformer(str(out), device="cpu").encode(TEXTS[:2])
    np.testing.assert_allclose(reloaded, ours, atol=1e-4)


def test_pad_batch_buckets_rows_and_columns():
    ids, mask = pad_batch([[1, 2, 3], [4]], max_rows=64)
    assert ids.shape == (2, 32) and mask.sum() == 4 and ids[0, :3].tolist() == [1, 2, 3]
    ids, _ = pad_batch([[1]] * 5, max_rows=64, length=8)
    assert ids.shape == (8, 8)  # rows to the next power of two


def test_token_ids_cut_long_texts_but_keep_the_closing_token(minilm):
    ids = minilm.token_ids(["word " * 500], max_length=16)[0]
    assert len(ids) == 16 and ids[-1] == minilm.token_ids(["x"])[0][-1]


def test_bad_directories_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 8,
                                                      "hidden_size": 8, "num_hidden_layers": 1,
                                                      "num_attention_heads": 2,
                                                      "intermediate_size": 8}))
    with pytest.raises(ValueError, match=r"config.json: .*model_type='gpt2'"):
        read_config(tmp_path)
