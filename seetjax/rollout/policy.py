"""The rollout's one interface to a model (`Policy`) and the policy over the KV-cache sampler
(`SamplerPolicy`): one cached row per episode, weight versions stamped on every sampled token,
rows forked on the device for branching (`seetjax.rollout.branching`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import jax

from seetjax.errors import invalid
from seetjax.sampling import Completion, Sampler, SamplingParams


class Policy(Protocol):
    """Anything that continues token sequences: the rollout's one interface to a model."""

    def start(self, prompts: Sequence[Sequence[int]]) -> None:
        """New sequences, one per episode, row i = prompts[i]."""

    def generate(self, rows: Sequence[int], chunks: Sequence[Sequence[int]],
                 max_new_tokens: Sequence[int]) -> list[Completion]:
        """Appends chunks[k] to sequence rows[k] (rows only ever shrink,
        but for the copies a forking policy adds: `SamplerPolicy.fork`), then samples one reply
        for each; replies end with a stop token ('stop') or at their limit ('length'). A
        versioned policy stamps each token's weight version (`Completion.versions`)."""


class SamplerPolicy:
    """The KV-cache sampler as a policy: one cached sequence per episode. Episodes of one task
    share their prompt, which is prefilled once and copied.

    Versions: the policy samples with the parameters of one weight `version` (the learner's
    update count of them) and stamps it on every token it samples (`Completion.versions`).
    `update_weights` is the one way to change both. The cached rows are tagged with the version
    that computed them: after an update every row is recomputed from its tokens under the new
    weights before the next reply, so no token is ever sampled from a stale cache (the
    "interruptible generation" of AReaL, arXiv:2505.24298, section 4)."""

    def __init__(self, sampler: Sampler, params: Any, sampling: SamplingParams,
                 stop_ids: Sequence[int], rng: jax.Array, version: int = 0):
        self.sampler, self.sampling = sampler, sampling
        self.stop_ids, self.rng = list(stop_ids), rng
        self._params, self._version = params, int(version)

    @property
    def params(self) -> Any:
        """The parameters it samples with (change them with `update_weights`)."""
        return self._params

    @property
    def version(self) -> int:
        """The weight version of `params`."""
        return self._version

    def update_weights(self, params: Any, version: int) -> None:
        """Samples with `params`, of weight `version`, from the next reply on: the cached rows
        (computed under the old weights) are recomputed before it."""
        if version <= self._version:
            raise invalid(self, "version", version, f"must be above the current version "
                          f"{self._version}")
        self._params, self._version = params, int(version)

    def start(self, prompts: Sequence[Sequence[int]]) -> None:
        unique: dict[tuple[int, ...], int] = {}
        for p in prompts:
            unique.setdefault(tuple(p), len(unique))
        seqs = self.sampler.prefill(self._params, [list(p) for p in unique])
        self.seqs = self.sampler.select(seqs, [unique[tuple(p)] for p in prompts])
        self.rows = list(range(len(prompts)))
        self.cached = [list(p) for p in prompts]  # each row's tokens as its cache holds them
        self.cached_version = self._version

    def fork(self, parent: int, children: Sequence[int]) -> None:
        """New rows `children`, each a copy of row `parent`'s KV cache on device (no re-prefill;
        `seetjax.rollout.branching`): they go on from the parent's tokens."""
        if parent not in self.rows or set(children) & set(self.rows) or (
                len(set(children)) != len(children)):
            raise invalid(self, "fork", (parent, list(children)),
                          f"needs a live parent row and new distinct child rows (live: {self.rows})")
        position = self.rows.index(parent)
        self.seqs = self.sampler.select(self.seqs, list(range(len(self.rows)))
                                        + [position] * len(children))
        self.cached += [list(self.cached[position]) for _ in children]
        self.rows += list(children)

    def generate(self, rows: Sequence[int], chunks: Sequence[Sequence[int]],
                 max_new_tokens: Sequence[int]) -> list[Completion]:
        if list(rows) != self.rows:
            position = {r: i for i, r in enumerate(self.rows)}
            self.seqs = self.sampler.select(self.seqs, [position[r] for r in rows])
            self.cached = [self.cached[position[r]] for r in rows]
            self.rows = list(rows)
        for tokens, chunk in zip(self.cached, chunks):
            tokens.extend(chunk)
        if self.cached_version != self._version:  # stale rows: recomputed, never reused
            self.seqs = self.sampler.prefill(self._params, self.cached)
            self.cached_version = self._version
        else:
            self.seqs = self.sampler.extend(self._params, self.seqs, chunks)
        self.rng, key = jax.random.split(self.rng)
        self.seqs, completions = self.sampler.generate(self._params, self.seqs, key,
                                                       list(max_new_tokens), self.stop_ids,
                                                       self.sampling)
        for tokens, c in zip(self.cached, completions):
            tokens.extend(c.tokens)  # sampled tokens enter the cache too
        return [dataclasses.replace(c, versions=[self._version] * len(c.tokens))
                for c in completions]
