"""Anchors: verified-correct turns that show what a failed turn should have done.

Only turns the checker passed become anchors. An anchor is keyed by task, turn and the state before
the turn (the calls executed earlier in the episode: two samples with the same executed history
are in the same state, the APIs being deterministic). Sources, in priority order:

- peer: another sample of the same task in the same batch passed the turn from the same state;
- historical: the agent's own earlier success, kept in a bounded pool (capacity per key, age);
- induced: a turn completed under stage-2 ground-truth interception.

The pool holds historical and induced anchors across training steps and serialises to JSON for
checkpoints; peer anchors come from the current batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from seetjax.errors import invalid
from seetjax.seet.fpld import as_call
from seetjax.tools.calls import ToolCall

# "branch": a turn an episode's own branch passed from the same state (rollout.branch)
AnchorSource = Literal["peer", "historical", "induced", "branch"]
SOURCES: tuple[AnchorSource, ...] = ("peer", "historical", "induced")  # priority order


@dataclasses.dataclass(frozen=True)
class AnchorStep:
    """One assistant message of the anchor turn: its calls and its tokens as generated."""

    calls: tuple[ToolCall, ...]
    tokens: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Anchor:
    task_id: str
    turn: int
    state_key: str
    steps: tuple[AnchorStep, ...]  # in order; the last one (no calls) ends the turn
    source: AnchorSource
    recorded_at: int = 0  # training step

    @property
    def calls(self) -> list[ToolCall]:
        return [c for s in self.steps for c in s.calls]

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.task_id, self.turn, self.state_key)

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "turn": self.turn, "state_key": self.state_key,
                "source": self.source, "recorded_at": self.recorded_at,
                "steps": [{"calls": [c.to_json() for c in s.calls], "tokens": list(s.tokens)}
                          for s in self.steps]}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Anchor:
        steps = tuple(AnchorStep(tuple(as_call(c) for c in s["calls"]), tuple(s["tokens"]))
                      for s in record["steps"])
        return cls(record["task_id"], int(record["turn"]), record["state_key"], steps,
                   record["source"], int(record["recorded_at"]))


def state_key(executed: Iterable[ToolCall]) -> str:
    """Key of the episode state reached by executing `executed` (in order) from the scenario."""
    text = json.dumps([c.key() for c in executed], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class AnchorPool:
    """Historical and induced anchors, newest first per key, at most `capacity` per key and
    `max_age` training steps old (None: no age limit)."""

    def __init__(self, capacity: int = 4, max_age: int | None = None):
        if capacity < 1:
            raise invalid(self, "capacity", capacity, "must be >= 1")
        self.capacity, self.max_age = capacity, max_age
        self._anchors: dict[tuple[str, int, str], list[Anchor]] = {}

    def add(self, anchor: Anchor) -> None:
        if anchor.source == "peer":
            raise ValueError("peer anchors live in their batch; store them as historical")
        entries = self._anchors.setdefault(anchor.key, [])
        entries[:] = [a for a in entries if a.calls != anchor.calls or a.source != anchor.source]
        entries.insert(0, anchor)
        del entries[self.capacity:]

    def lookup(self, task_id: str, turn: int, key: str, now: int,
               sources: Sequence[AnchorSource] = ("historical", "induced")) -> Anchor | None:
        """The best anchor for the key: by source priority, then newest."""
        fresh = [a for a in self._anchors.get((task_id, turn, key), [])
                 if a.source in sources and (self.max_age is None or now - a.recorded_at
                                             <= self.max_age)]
        return min(fresh, key=lambda a: (SOURCES.index(a.source), -a.recorded_at), default=None)

    def evict_older_than(self, now: int) -> None:
        if self.max_age is None:
            return
        for key in list(self._anchors):
            self._anchors[key] = [a for a in self._anchors[key]
                                  if now - a.recorded_at <= self.max_age]
            if not self._anchors[key]:
                del self._anchors[key]

    def __len__(self) -> int:
        return sum(map(len, self._anchors.values()))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(SOURCES[1:], 0)
        for entries in self._anchors.values():
            for a in entries:
                out[a.source] += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "max_age": self.max_age,
                "anchors": [a.to_json() for entries in self._anchors.values() for a in entries]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.capacity, self.max_age = int(state["capacity"]), state["max_age"]
        self._anchors = {}
        for record in state["anchors"]:  # saved newest first within each key
            anchor = Anchor.from_json(record)
            entries = self._anchors.setdefault(anchor.key, [])
            if len(entries) < self.capacity:
                entries.append(anchor)


def choose_anchor(key: tuple[str, int, str], peers: Mapping[tuple[str, int, str], Anchor],
                  pool: AnchorPool, now: int, sources: Sequence[AnchorSource]) -> Anchor | None:
    """peer > historical > induced, among the allowed `sources`."""
    if "peer" in sources and key in peers:
        return peers[key]
    return pool.lookup(*key, now=now, sources=[s for s in sources if s != "peer"])
