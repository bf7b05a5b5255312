"""Per-example statistics for coreset selection: loss under a model, and embeddings.

`ModelScorer` runs the model once over every example, batched and jitted, and returns for each
  loss       the mean next-token negative log-likelihood over its trained tokens,
             (1 / |M|) sum_{t in M} -log p(x_t | x_<t), M = the tokens with loss_mask 1;
  embedding  the mean of the final hidden states over the same tokens (each state has read the
             whole dialog before it, so it reflects the context as well as the reply).
Rows are padded to a few bucket lengths (2^k and 3 * 2^k), so the jitted function compiles once per
bucket, never per batch. The log-probs are the learner's (`seetjax.losses.logprobs`); with
`logit_chunk` only that many positions of logits exist at once (large vocabularies).

`ngram_embeddings` is the model-free fallback: hashed token n-grams of the trained tokens
(feature hashing, Weinberger et al. 2009) weighted by sublinear tf-idf, L2-normalised.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.data.formatter import Example
from seetjax.errors import invalid
from seetjax.losses.logprobs import sequence_token_stats
from seetjax.models.transformer import Transformer

# Odd 64-bit multipliers of the n-gram hash, one per position in the n-gram.
_HASH_MULTIPLIERS = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                              0xD6E8FEB86659FD93], np.uint64)


@dataclasses.dataclass(frozen=True)
class Scores:
    losses: np.ndarray  # [n] f32 mean token loss
    embeddings: np.ndarray  # [n, hidden] f32


class ModelScorer:
    """Loss and mean hidden state of examples under `model` (see the module docstring): rows of
    `batch_size`, padded to buckets of at least `min_bucket` tokens; `logit_chunk` as the
    learner's `logprob_chunk` (0: all positions at once)."""

    def __init__(self, model: Transformer, batch_size: int = 8, min_bucket: int = 128,
                 logit_chunk: int = 0):
        if batch_size < 1 or min_bucket < 1:
            raise invalid(self, "batch_size, min_bucket", (batch_size, min_bucket),
                          "must be >= 1")
        self.batch_size, self.min_bucket = batch_size, min_bucket
        self.hidden_size = model.config.hidden_size
        self.graphdef, self.state = nnx.split(model)
        self._score = _jitted_score(self.graphdef, logit_chunk)

    def bucket(self, length: int) -> int:
        """The padded row length of an example of `length` tokens: the smallest 2^k or 3 * 2^k
        that holds it (at most a third wasted, two compilations per doubling of length)."""
        power = 1 << max(0, length - 1).bit_length()
        return max(self.min_bucket, 3 * power // 4 if 3 * power // 4 >= length else power)

    def __call__(self, examples: Sequence[Example]) -> Scores:
        """Scores of `examples`, in their order."""
        n = len(examples)
        losses = np.zeros(n, np.float32)
        embeddings = np.zeros((n, self.hidden_size), np.float32)
        # Similar lengths together: each batch pads to the bucket of its longest example.
        order = sorted(range(n), key=lambda i: examples[i].num_tokens)
        for start in range(0, n, self.batch_size):
            chunk = order[start:start + self.batch_size]
            rows = _padded_rows([examples[i] for i in chunk], self.batch_size,
                                self.bucket(max(examples[i].num_tokens for i in chunk)))
            loss, pooled = jax.device_get(self._score(self.state, *rows))
            losses[chunk] = loss[:len(chunk)]
            embeddings[chunk] = pooled[:len(chunk)]
        return Scores(losses, embeddings)

    def compile_count(self) -> int:
        """Compilations so far of the scoring function of this model structure."""
        return self._score._cache_size()


@functools.lru_cache(maxsize=8)
def _jitted_score(graphdef: nnx.GraphDef, chunk: int):
    # One jitted function per model structure: scorers of later parameters (evaluation during
    # training) reuse its compilations.
    return jax.jit(functools.partial(_score_rows, graphdef, chunk))


def _padded_rows(examples: Sequence[Example], rows: int, length: int) -> tuple[np.ndarray, ...]:
    tokens = np.zeros((rows, length), np.int32)
    segments = np.zeros((rows, length), np.int32)
    mask = np.zeros((rows, length), np.float32)
    for r, e in enumerate(examples):
        tokens[r, :e.num_tokens] = e.tokens
        segments[r, :e.num_tokens] = 1
        mask[r, :e.num_tokens] = e.loss_mask != 0  # each trained token once, unweighted
    positions = np.broadcast_to(np.arange(length, dtype=np.int32), (rows, length))
    return tokens, positions, segments, mask


def _score_rows(graphdef: nnx.GraphDef, chunk: int, state: nnx.State, tokens: jax.Array,
                positions: jax.Array, segments: jax.Array, mask: jax.Array
                ) -> tuple[jax.Array, jax.Array]:
    model = nnx.merge(graphdef, state)
    hidden, _ = model.hidden_states(tokens, positions, segments)
    # The learner's own log-probs (entry t: token t given the tokens before it), `chunk`
    # positions of logits at a time.
    logprobs = sequence_token_stats(hidden, tokens, model.logits, chunk=chunk,
                                    with_entropy=False).logprobs
    count = jnp.maximum(mask.sum(-1), 1.0)
    loss = -(logprobs * mask).sum(-1) / count  # mask[:, 0] is 0: the template starts every row
    pooled = jnp.einsum("bt,bth->bh", mask, hidden.astype(jnp.float32)) / count[:, None]
    return loss, pooled


def ngram_embeddings(examples: Sequence[Example], dim: int = 1024,
                     orders: Sequence[int] = (1, 2, 3)) -> np.ndarray:
    """[n, dim] L2-normalised sublinear tf-idf vectors of hashed n-grams of the trained tokens."""
    if not 1 <= max(orders, default=0) <= len(_HASH_MULTIPLIERS) or min(orders) < 1:
        raise invalid("ngram_embeddings", "orders", tuple(orders),
                      f"each must be in 1...{len(_HASH_MULTIPLIERS)}")
    counts = np.zeros((len(examples), dim), np.float32)
    for row, e in enumerate(examples):
        tokens = e.tokens[e.loss_mask.astype(bool)].astype(np.uint64)
        for n in orders:
            if len(tokens) < n:
                continue
            h = np.zeros(len(tokens) - n + 1, np.uint64)
            for k in range(n):  # uint64 arithmetic wraps: a multiplicative hash of the n-gram
                h = (h + tokens[k:len(tokens) - n + 1 + k]) * _HASH_MULTIPLIERS[k]
            np.add.at(counts[row], (h >> np.uint64(32)) % np.uint64(dim), 1.0)
    document_frequency = (counts > 0).sum(0)
    idf = np.log((1 + len(examples)) / (1 + document_frequency)) + 1.0
    vectors = np.log1p(counts) * idf
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
