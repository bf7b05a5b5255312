"""Prefix reuse for the engine: cached rows of prompts and finished conversations (prompt + reply,
as cached), kept in an LRU under a token budget. A new prompt sharing at least `min_tokens` with
one of them copies that cached row and prefills only the rest (exact up to float rounding), so a
multi-turn client (tool results appended to the previous reply) re-encodes only what is new.

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
from seetjax.serving.decode import truncate_to


class PrefixCache:
    """Cached rows by token sequence, each with its weight version; `max_tokens` 0 keeps
    none."""

    def __init__(self, sampler: Sampler, max_tokens: int, min_tokens: int):
        self.sampler, self.max_tokens, self.min_tokens = sampler, max_tokens, min_tokens
        self.min_entries = 1  # evicted down to this many at least (`keep`)
        self._entries: collections.OrderedDict[
            tuple[int, ...], tuple[np.ndarray, SequenceBatch, int]] = collections.OrderedDict()
        self._truncate = jax.jit(truncate_to, donate_argnums=(0,))

    def prefill(self, params: nnx.State, prompt: list[int], version: int
                ) -> tuple[SequenceBatch, int]:
        """The prompt's cached row under `params` (of weight `version`), reusing the longest
        cached prefix of that version; returns (row, reused)."""
        best, best_key = 0, None
        query = np.asarray(prompt, np.int32)
        for key, (tokens, _, tag) in self._entries.items():
            m = min(len(tokens), len(query) - 1)  # at least one token left to compute logits
            if m <= best or tag != version:
                continue
            same = tokens[:m] == query[:m]
            common = m if same.all() else int(same.argmin())
            if common > best:
                best, best_key = common, key
        if best_key is not None and best >= self.min_tokens:
            self._entries.move_to_end(best_key)
            cached = self._entries[best_key][1]
            copy = self.sampler.select(cached, [0])  # extend consumes its input: keep the entry
            copy = SequenceBatch(self._truncate(copy.state, jnp.int32(best)), 1)
            seqs = self.sampler.extend(params, copy, [prompt[best:]])
            reused = best
        else:
            seqs = self.sampler.prefill(params, [prompt])
            reused = 0
        self.remember(prompt, seqs, version)
        return seqs, reused

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
