"""Exact and near-duplicate detection across a whole run's output (not per shard).

Both read a record's normalised conversation: what the user asks and what the assistant says and
calls (names and arguments), lower-cased with whitespace collapsed; the system prompt and tool
outputs, written by the environment, are left out. Exact: the SHA-256 of that text. Near: MinHash
signatures of its word shingles in an LSH index (`datasketch`), a candidate confirmed when the
estimated Jaccard similarity reaches `dedup.threshold`. Decisions depend only on the records
added before, so the same order of records gives the same decisions.
"""

from __future__ import annotations

import hashlib
import json
import re

from datasketch import MinHash, MinHashLSH

from seetjax.distill.config import Dedup
from seetjax.distill.records import Record

_SPACE = re.compile(r"\s+")
_MINHASH_SEED = 1


def normalized_text(record: Record) -> str:
    parts = []
    for turn in record.turns:
        if turn.role in ("user", "assistant"):
            parts.append(turn.content)
        for call in turn.tool_calls:
            try:
                arguments = json.dumps(json.loads(call.arguments), sort_keys=True,
                                       ensure_ascii=False)
            except json.JSONDecodeError:
                arguments = call.arguments
            parts.append(f"{call.name} {arguments}")
    return _SPACE.sub(" ", " ".join(parts)).strip().lower()


class Deduplicator:
    """`check` says whether a record duplicates one added before; `add` remembers it."""

    def __init__(self, config: Dedup):
        self.config = config
        self.exact: dict[str, str] = {}  # content hash -> record id
        self.signatures: dict[str, MinHash] = {}
        self.lsh = MinHashLSH(threshold=config.threshold, num_perm=config.num_perm)

    def _signature(self, text: str) -> MinHash:
        words = text.split()
        n = self.config.shingle_words
        shingles = {" ".join(words[i:i + n]) for i in range(max(len(words) - n + 1, 1))}
        signature = MinHash(num_perm=self.config.num_perm, seed=_MINHASH_SEED)
        signature.update_batch([s.encode("utf-8") for s in shingles])
        return signature

    def check(self, record: Record) -> tuple[str, str] | None:
        """("exact" or "near", the id of the record it duplicates), or None."""
        text = normalized_text(record)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if self.config.exact and digest in self.exact:
            return "exact", self.exact[digest]
        if self.config.near:
            signature = self._signature(text)
            # Candidates in sorted order: the same one is named whatever the index's order.
            for other in sorted(self.lsh.query(signature)):
                if signature.jaccard(self.signatures[other]) >= self.config.threshold:
                    return "near", other
        return None

    def add(self, record: Record) -> None:
        text = normalized_text(record)
        self.exact.setdefault(hashlib.sha256(text.encode()).hexdigest(), record.id)
        if self.config.near and record.id not in self.signatures:
            signature = self._signature(text)
            self.signatures[record.id] = signature
            self.lsh.insert(record.id, signature)
