"""What every proposer shares: the `Action` it proposes, the `PlanContext` it reads, and small
helpers for calls and slot values."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from seetjax.envs.generated.world import WorldFacts
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ToolExecutor


@dataclass(frozen=True)
class Action:
    """One user intent and the calls that fulfil it."""

    intent: str
    calls: tuple[ToolCall, ...]
    slots: Mapping[str, str] = field(default_factory=dict)
    missing: str | None = None


@dataclass
class PlanContext:
    """What proposers read: the live instances, the split's vocabulary and earlier outputs."""

    rng: random.Random
    split: str
    facts: WorldFacts
    executor: ToolExecutor
    initial_config: Mapping[str, Any]
    last_output: dict[str, str] = field(default_factory=dict)

    def instance(self, class_name: str) -> Any:
        return self.executor.instances[class_name]


def call(tool: str, /, **args: Any) -> ToolCall:
    return ToolCall(tool, args)


def quoted(value: str) -> str:
    return f"'{value}'"


def words_of(text: str) -> list[str]:
    return [w.strip(".,!?'") for w in text.split() if len(w.strip(".,!?'")) >= 4]



Proposer = Callable[[PlanContext], Action | None]
