"""Exact and near-duplicate detection across a whole run's output (not per shard).

Both read a record's normalised conversation: what the user asks and what the assistant says and
calls (names and arguments), lower-cased with whitespace collapsed; the system prompt and tool
outputs, written by the environment, are left out. Exact: the SHA-256 of that text. Near: MinHash
signatures of its word shingles in an LSH index (`datasketch`) propose candidates, and a candidate
is a duplicate when the exact Jaccard similarity of the two shingle sets reaches
`dedup.threshold`. The index's (bands, rows) are chosen for the threshold (`lsh_params`) so that
a pair at the threshold is missed with probability at most `MAX_MISS`; the LSH default (equal
weights on false positives and negatives) misses about half of them. The exact check needs each
record's shingles: kept as sorted 64-bit hashes, 8 bytes per shingle (a collision in a run is
improbable, ~n^2 / 2^64). Decisions depend only on the records added before, so the same order of
records gives the same decisions.
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
from datasketch import MinHash, MinHashLSH

from seetjax.distill.config import Dedup
from seetjax.distill.records import Record

_SPACE = re.compile(r"\s+")
_MINHASH_SEED = 1
MAX_MISS = 1e-6  # chance that LSH never proposes a pair at exactly the threshold


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


def lsh_params(threshold: float, num_perm: int, max_miss: float = MAX_MISS) -> tuple[int, int]:
    """(bands, rows) of an LSH index over `num_perm` permutations: the most rows per band (the
    fewest chance candidates) with which a pair of Jaccard `threshold` shares no band with
    probability at most `max_miss`, i.e. (1 - threshold^rows)^bands <= max_miss; one row per
    band when no choice reaches it."""
    best = (num_perm, 1)
    for rows in range(2, num_perm + 1):
        bands = num_perm // rows
        if (1.0 - threshold ** rows) ** bands <= max_miss:
            best = (bands, rows)
    return best


def _low32(value: np.uint64) -> np.uint64:
    return value & np.uint64(0xFFFFFFFF)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted arrays of distinct shingle hashes."""
    shared = np.intersect1d(a, b, assume_unique=True).size
    union = a.size + b.size - shared
    return shared / union if union else 1.0


class Deduplicator:
    """`check` says whether a record duplicates one added before; `add` remembers it."""

    def __init__(self, config: Dedup):
        self.config = config
        self.exact: dict[str, str] = {}  # content hash -> record id
        self.shingles: dict[str, np.ndarray] = {}  # record id -> sorted shingle hashes
        self.lsh = MinHashLSH(num_perm=config.num_perm,
                              params=lsh_params(config.threshold, config.num_perm))
        # Signatures start as copies of an empty one: a new MinHash draws its permutations anew.
        # MinHash takes 32-bit hashes: the low half of the shingles' own, not a second hash.
        self.empty = MinHash(config.num_perm, seed=_MINHASH_SEED, hashfunc=_low32)
        self._last: tuple[str, np.ndarray, MinHash] | None = None

    def _shingles(self, text: str) -> np.ndarray:
        words = text.split()
        n = self.config.shingle_words
        shingles = {" ".join(words[i:i + n]).encode("utf-8")
                    for i in range(max(len(words) - n + 1, 1))}
        return np.unique(np.fromiter(
            (int.from_bytes(hashlib.blake2b(s, digest_size=8).digest(), "little")
             for s in shingles), dtype=np.uint64, count=len(shingles)))

    def _near_keys(self, digest: str, text: str) -> tuple[np.ndarray, MinHash]:
        """The shingles and MinHash signature of `text`; the last text's are reused, as `add`
        follows `check` on the same record."""
        if self._last is None or self._last[0] != digest:
            shingles = self._shingles(text)
            signature = self.empty.copy()
            signature.update_batch(shingles)
            self._last = (digest, shingles, signature)
        return self._last[1], self._last[2]

    def check(self, record: Record) -> tuple[str, str] | None:
        """("exact" or "near", the id of the record it duplicates), or None."""
        text = normalized_text(record)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if self.config.exact and digest in self.exact:
            return "exact", self.exact[digest]
        if self.config.near:
            shingles, signature = self._near_keys(digest, text)
            # Candidates in sorted order: the same one is named whatever the index's order.
            for other in sorted(self.lsh.query(signature)):
                if jaccard(shingles, self.shingles[other]) >= self.config.threshold:
                    return "near", other
        return None

    def add(self, record: Record) -> None:
        text = normalized_text(record)
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.exact.setdefault(digest, record.id)
        if self.config.near and record.id not in self.shingles:
            shingles, signature = self._near_keys(digest, text)
            self.shingles[record.id] = shingles
            self.lsh.insert(record.id, signature)
