"""Model scoring: the per-example loss and embedding match a direct computation; static shapes."""

import numpy as np
import pytest
from flax import nnx

from seetjax.data.scoring import ModelScorer, ngram_embeddings
from seetjax.models import ModelConfig, Transformer
from tests.data.conftest import make_examples

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                  num_kv_heads=2, initializer_range=0.2)


@pytest.fixture(scope="module")
def model():
    return Transformer(CFG, rngs=nnx.Rngs(0))


@nnx.jit
def _forward(model, tokens, positions, segments):
    hidden, _ = model.hidden_states(tokens, positions, segments)
    return hidden, model.logits(hidden)


def reference(model, example):
    """Loss and mean hidden state of one example, unpadded, in numpy."""
    n = example.num_tokens
    tokens = example.tokens[None]
    positions = np.arange(n)[None]
    hidden, logits = _forward(model, tokens, positions, np.ones((1, n), np.int32))
    logits = np.asarray(logits)[0].astype(np.float64)
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    mask = example.loss_mask.astype(bool)
    nll = -logp[np.arange(n - 1), example.tokens[1:]][mask[1:]]
    return nll.mean(), np.asarray(hidden)[0][mask].mean(0)


def test_losses_and_embeddings_match_a_direct_computation(model):
    # 4 lengths over two buckets (32, 48), batches of 3: padded rows and padded lengths
    examples = make_examples(4, min_len=20, max_len=40)
    scorer = ModelScorer(model, batch_size=3, min_bucket=16)
    assert len({scorer.bucket(e.num_tokens) for e in examples}) == 2
    scores = scorer(examples)
    for i, e in enumerate(examples):
        loss, embedding = reference(model, e)
        assert scores.losses[i] == pytest.approx(loss, rel=1e-4)
        np.testing.assert_allclose(scores.embeddings[i], embedding, rtol=1e-4, atol=1e-5)


def test_compiles_once_per_bucket_never_per_batch(model):
    scorer = ModelScorer(model, batch_size=2, min_bucket=16)
    before = scorer.compile_count()  # other tests' buckets, shared by every scorer of the model
    scorer(make_examples(12, min_len=5, max_len=16))  # one bucket (16), 6 batches
    assert scorer.compile_count() == before + 1
    again = ModelScorer(model, batch_size=2, min_bucket=16)  # e.g. later params, same structure
    again(make_examples(5, seed=1, min_len=17, max_len=24))  # bucket 24
    again(make_examples(5, seed=2, min_len=5, max_len=16))  # bucket 16 again: no compilation
    assert scorer.compile_count() == before + 2
    assert [scorer.bucket(n) for n in (1, 16, 17, 24, 25, 33, 48, 49)] == \
        [16, 16, 24, 24, 32, 48, 48, 64]


def test_ngram_embeddings_are_deterministic_unit_vectors():
    examples = make_examples(6)
    a, b = ngram_embeddings(examples), ngram_embeddings(examples)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    same = ngram_embeddings([examples[0], examples[0], examples[1]])
    assert same[0] @ same[1] == pytest.approx(1.0) and same[0] @ same[2] < 0.9
    with pytest.raises(ValueError, match="orders"):
        ngram_embeddings(examples, orders=(0,))


def test_chunked_logits_give_the_same_scores(model):
    examples = make_examples(3, min_len=20, max_len=30)
    whole = ModelScorer(model, batch_size=3, min_bucket=32)(examples)
    chunked = ModelScorer(model, batch_size=3, min_bucket=32, logit_chunk=8)(examples)
    np.testing.assert_allclose(chunked.losses, whole.losses, rtol=1e-5)
    np.testing.assert_array_equal(chunked.embeddings, whole.embeddings)
