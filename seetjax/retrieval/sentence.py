"""Texts in, unit-norm embeddings out: the tokenizer of an HF directory plus a `BertEncoder`.

Batches are padded to a few fixed shapes (length rounded up to a multiple of `LENGTH_BUCKET`, rows
to a power of two) so that encoding a corpus compiles a handful of programs, not one per batch;
texts are encoded sorted by length so that little of each batch is padding.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
import tokenizers
from flax import nnx

from seetjax.retrieval.encoder import BertEncoder, embed
from seetjax.retrieval.hf_encoder import load_encoder, read_config

LENGTH_BUCKET = 32


class QueryError(ValueError):
    """A query the retriever refuses: empty, or longer than the encoder reads."""


class EmptyQueryError(QueryError):
    pass


class QueryTooLongError(QueryError):
    pass


def check_not_empty(queries: Sequence[str]) -> None:
    for i, query in enumerate(queries):
        if not query.strip():
            raise EmptyQueryError(f"query {i} is empty")


def max_seq_length(path: Path, model_max: int) -> int:
    """sentence-transformers' `max_seq_length` when the directory has one, else the model's."""
    config = path / "sentence_bert_config.json"
    if config.is_file():
        return min(int(json.loads(config.read_text())["max_seq_length"]), model_max)
    return model_max


@functools.partial(jax.jit, static_argnums=0)
def embed_state(graphdef: nnx.GraphDef, state: nnx.State, ids: jax.Array,
                mask: jax.Array) -> jax.Array:
    """`embed` on a split model: pure, so one compiled program serves every parameter value."""
    return embed(nnx.merge(graphdef, state), ids, mask)


class SentenceEncoder:
    """An encoder with its tokenizer: `encode(texts)` -> float32 [N, H], rows of unit norm."""

    def __init__(self, model: BertEncoder, tokenizer: tokenizers.Tokenizer, max_length: int,
                 source: Path):
        self.graphdef, self.state = nnx.split(model)
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.source = source  # the directory the tokenizer and configs come from
        self.dim = model.config.hidden_size

    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> SentenceEncoder:
        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{path}: no tokenizer.json (a fast tokenizer is needed)")
        tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.no_padding()  # padding (bucketed) and cutting (`token_ids`) are ours
        tokenizer.no_truncation()
        model = load_encoder(path)
        return cls(model, tokenizer, max_seq_length(path, read_config(path).max_tokens), path)

    @property
    def model(self) -> BertEncoder:
        return nnx.merge(self.graphdef, self.state)

    def token_ids(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Token ids with special tokens, truncated to `max_length` (default: the encoder's)."""
        ids = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        limit = max_length or self.max_length
        # Keep the closing special token ([SEP] / </s>) when cutting, as the tokenizer would.
        return [t if len(t) <= limit else [*t[:limit - 1], t[-1]] for t in ids]

    def check_queries(self, queries: Sequence[str]) -> None:
        """Raises EmptyQueryError / QueryTooLongError for the first query the encoder cannot read
        whole (a query is never silently cut: its end may be what it asks for)."""
        check_not_empty(queries)
        for i, ids in enumerate(e.ids for e in self.tokenizer.encode_batch(list(queries))):
            if len(ids) > self.max_length:
                raise QueryTooLongError(f"query {i} has {len(ids)} tokens; the encoder reads at "
                                        f"most {self.max_length}")

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Embeddings of `texts` (documents are truncated to the encoder's length)."""
        ids = self.token_ids(texts)
        out = np.zeros((len(ids), self.dim), np.float32)
        order = np.argsort([len(t) for t in ids], kind="stable")
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            batch_ids, batch_mask = pad_batch([ids[r] for r in rows], batch_size)
            out[rows] = np.asarray(embed_state(self.graphdef, self.state, batch_ids,
                                               batch_mask))[:len(rows)]
        return out


def pad_batch(ids: Sequence[Sequence[int]], max_rows: int,
              length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) int32/bool arrays: rows padded to a power of two (at most `max_rows`), columns
    to `length` or the longest row rounded up to LENGTH_BUCKET; pad id 0 (masked anyway)."""
    rows = min(max_rows, 1 << max(len(ids) - 1, 0).bit_length())
    if length is None:
        length = -(-max(len(t) for t in ids) // LENGTH_BUCKET) * LENGTH_BUCKET
    out = np.zeros((rows, length), np.int32)
    mask = np.zeros((rows, length), bool)
    for i, t in enumerate(ids):
        out[i, :len(t)] = t[:length]
        mask[i, :len(t)] = True
    return out, mask
