"""Rehearsal memory for online continual learning: a bounded buffer of past examples.

Examples are offered to the buffer once each, as the data stream delivers them (a continual stage
ends, SEET collects new dialogs); the pipeline of later training mixes the buffer's contents in at
a replay ratio (`seetjax.data.pipeline`), experience replay against forgetting (Rolnick et al.
2019; Chaudhry et al. 2019 show a tiny reservoir memory works well).

Policies:
- reservoir: a uniform sample of everything offered so far (Vitter 1985, Algorithm R): the
  n-th example (0-based) enters when n < capacity, else replaces slot j ~ U{0..n} if j < capacity.
  The draw for the n-th offer is seeded by (seed, n), so no generator state needs saving.
- recency: the last `capacity` examples offered (first in, first out).

The state is JSON: the policy, the count offered and the ids held. Examples are restored by id
from the data they came from (a continual run re-reads its stages on resume).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from seetjax.data.formatter import Example
from seetjax.errors import invalid

POLICIES = ("reservoir", "recency")


class ReplayBuffer:
    """A bounded memory of examples under the `reservoir` or `recency` policy (module docstring)."""

    def __init__(self, capacity: int, policy: str = "reservoir", seed: int = 0):
        if capacity < 1:
            raise invalid(self, "capacity", capacity, "must be >= 1")
        if policy not in POLICIES:
            raise invalid(self, "policy", policy, f"one of {POLICIES}")
        self.capacity, self.policy, self.seed = capacity, policy, seed
        self.offered = 0  # examples offered so far
        self._items: list[Example] = []

    def __len__(self) -> int:
        return len(self._items)

    @property
    def items(self) -> list[Example]:
        """The examples held, in slot order."""
        return list(self._items)

    def add(self, examples: Iterable[Example]) -> None:
        """Offers each example once, in order."""
        for example in examples:
            if len(self._items) < self.capacity:
                self._items.append(example)
            elif self.policy == "recency":
                self._items = self._items[1:] + [example]
            else:
                slot = int(np.random.default_rng([self.seed, self.offered]).integers(
                    self.offered + 1))
                if slot < self.capacity:
                    self._items[slot] = example
            self.offered += 1

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: settings, the count offered and the ids held in slot order."""
        return {"capacity": self.capacity, "policy": self.policy, "seed": self.seed,
                "offered": self.offered, "ids": [e.id for e in self._items]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], examples: Mapping[str, Example]) -> ReplayBuffer:
        """The buffer of `state_dict()`, its examples looked up by id in `examples`."""
        for field in ("capacity", "policy", "seed", "offered", "ids"):
            if field not in state:
                raise ValueError(f"replay buffer state: field {field!r} missing")
        buffer = cls(state["capacity"], state["policy"], state["seed"])
        missing = [i for i in state["ids"] if i not in examples]
        if missing:
            raise ValueError(f"replay buffer state: {len(missing)} example ids not in the data, "
                             f"e.g. {missing[:3]}")
        buffer.offered = int(state["offered"])
        buffer._items = [examples[i] for i in state["ids"]]
        return buffer
