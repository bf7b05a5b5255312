"""Prefix reuse for the engine: cached rows of prompts and finished conversations (prompt + reply,
as cached), kept in an LRU under a token budget. A new prompt sharing at least `min_tokens` with
one of them copies that cached row and prefills only the rest (exact up to float rounding), so a
multi-turn client (tool results appended to the previous reply) re-encodes only what is new.
Prompts admitted together are prefilled in one batched call, each row from its own prefix.

Every entry is tagged with the weight version that computed it and serves only requests of that
version: a weight update drops the older entries (`drop_older`), so a cached prefix of old
weights is never reused (NeMo-RL served weights 17 steps old from such a cache).

A rollout keeps one entry per episode (its conversation so far): `keep` raises the number of
entries never evicted, whatever the token budget, to its number of episodes.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from seetjax.sampling.sampler import Sampler, SequenceBatch
from seetjax.serving.decode import insert_rows, truncate_to


def shared_prefix(cached: np.ndarray, query: np.ndarray) -> int:
    """How many leading tokens of `query` a row caching `cached` holds, leaving at least one of
    the query to compute (its logits come from there)."""
    m = min(len(cached), len(query) - 1)
    same = cached[:m] == query[:m]
    return m if same.all() else int(same.argmin())


class PrefixCache:
    """Cached rows by token sequence, each with its weight version; `max_tokens` 0 keeps
    none."""

    def __init__(self, sampler: Sampler, max_tokens: int, min_tokens: int):
        self.sampler, self.max_tokens, self.min_tokens = sampler, max_tokens, min_tokens
        self.min_entries = 1  # evicted down to this many at least (`keep`)
        self._entries: collections.OrderedDict[
            tuple[int, ...], tuple[np.ndarray, SequenceBatch, int]] = collections.OrderedDict()
        self._truncate = jax.jit(truncate_to, donate_argnums=(0,))
        self._insert = jax.jit(insert_rows, donate_argnums=(0,))
        self.jits = (self._truncate, self._insert)

    def prefill(self, params: nnx.State, prompts: Sequence[Sequence[int]], version: int,
                slots: int = 0, remember: bool = True
                ) -> tuple[SequenceBatch, list[int], list[int]]:
        """The prompts' cached rows under `params` (of weight `version`) in one batched
        `extend`, in a cache of at least `slots` slots: each row starts from the longest cached
        prefix of that version and computes only the rest; identical prompts share a row; with
        `remember`, each prompt's row is kept for reuse (a copy of it). Returns (the rows, each
        prompt's row, the tokens each prompt reused: all of them for a repeat of an earlier
        prompt)."""
        unique = list(dict.fromkeys(tuple(p) for p in prompts))
        hits = [self._longest(np.asarray(p, np.int32), version) for p in unique]
        reused = [n for n, _ in hits]
        seqs = self.sampler.empty(len(unique), max(*reused, slots))
        state = seqs.state
        for i, (_, cached) in enumerate(hits):
            if cached is not None:  # copied: extend consumes its input, the entry stays
                state = self._insert(state, cached.state, jnp.zeros((1,), jnp.int32),
                                     jnp.full((1,), i, jnp.int32))
        lengths = np.zeros((state.logits.shape[0],), np.int32)
        lengths[:len(reused)] = reused
        state = self._truncate(state, jnp.asarray(lengths))
        seqs = self.sampler.extend(params, SequenceBatch(state, len(unique)),
                                   [list(p[n:]) for p, n in zip(unique, reused)])
        for i, prompt in enumerate(unique if self.max_tokens > 0 and remember else ()):
            self.remember(prompt, seqs if len(unique) == 1 else self.sampler.select(seqs, [i]),
                          version)
        row = {p: i for i, p in enumerate(unique)}
        rows = [row[tuple(p)] for p in prompts]
        first = {r: i for i, r in reversed(list(enumerate(rows)))}
        return seqs, rows, [reused[r] if first[r] == i else len(prompts[i])
                            for i, r in enumerate(rows)]

    def _longest(self, query: np.ndarray, version: int) -> tuple[int, SequenceBatch | None]:
        """(tokens reused, the cached row) of the longest cached prefix of `query` of weight
        `version` (at least `min_tokens`), or (0, None); the entry becomes the most recent."""
        best, best_key = 0, None
        for key, (tokens, _, tag) in self._entries.items():
            if min(len(tokens), len(query) - 1) <= best or tag != version:
                continue
            common = shared_prefix(tokens, query)
            if common > best:
                best, best_key = common, key
        if best_key is None or best < self.min_tokens:
            return 0, None
        self._entries.move_to_end(best_key)
        return best, self._entries[best_key][1]

    def remember(self, tokens: Sequence[int], seqs: SequenceBatch, version: int) -> None:
        """Keeps a cached row, computed under weight `version`, for prefix reuse (LRU under the
        token budget)."""
        if self.max_tokens <= 0:
            return
        key = tuple(tokens)
        self._entries[key] = (np.asarray(tokens, np.int32), seqs, version)
        self._entries.move_to_end(key)
        # An entry that is a prefix of the new one is covered by it.
        for other in [k for k in self._entries if k != key and len(k) < len(key)
                      and key[:len(k)] == k]:
            del self._entries[other]
        while (sum(e[1].state.cache.slots for e in self._entries.values())
               > self.max_tokens and len(self._entries) > self.min_entries):
            self._entries.popitem(last=False)

    def keep(self, entries: int) -> None:
        """Keeps at least `entries` entries (the most recently used) over the token budget."""
        self.min_entries = max(self.min_entries, int(entries))

    def drop_older(self, version: int) -> int:
        """Drops the entries computed under weight versions before `version`; returns how many."""
        old = [k for k, (_, _, tag) in self._entries.items() if tag < version]
        for key in old:
            del self._entries[key]
        return len(old)
