"""Each token's text and raw bytes: OpenAI's `logprobs` entries, and what constrained decoding
reads of the vocabulary (`ChatFormat.vocabulary`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from seetjax.models.tokenizer import Tokenizer


class TokenText:
    """Each token's text and raw bytes, for logprobs (a byte-level BPE token may be part of a
    UTF-8 character: its `bytes` are exact, its text is what decoding it alone gives)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._byte_of = {c: b for b, c in _bytes_to_unicode().items()}

    @functools.lru_cache(maxsize=65_536)  # noqa: B019 - one instance per server
    def text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    @functools.lru_cache(maxsize=65_536)  # noqa: B019
    def bytes(self, token_id: int) -> list[int]:
        piece = self.tokenizer.hf.convert_ids_to_tokens(token_id)
        if isinstance(piece, str) and piece and all(c in self._byte_of for c in piece):
            return [self._byte_of[c] for c in piece]
        return list(self.text(token_id).encode("utf-8"))

    def logprobs(self, token_ids: Sequence[int], logprobs: Sequence[float],
                 tops: Sequence[Sequence[tuple[int, float]]]) -> list[dict[str, Any]]:
        """OpenAI's `logprobs.content` entries."""
        return [{"token": self.text(t), "logprob": lp, "bytes": self.bytes(t),
                 "top_logprobs": [{"token": self.text(a), "logprob": alp, "bytes": self.bytes(a)}
                                  for a, alp in top]}
                for t, lp, top in zip(token_ids, logprobs, tops)]


@functools.lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> the printable character a byte-level BPE uses."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}
