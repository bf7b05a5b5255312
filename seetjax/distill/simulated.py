"""Tasks over API classes written here (simulated backends), in BFCL's shape.

A `SimulatedTask` is a `BfclTask` whose involved classes are ours instead of bfcl_eval's: the
same fields (initial state, user turns, ground-truth calls per turn, docs), so `BfclEnv` runs its
episodes and BFCL's checker (state and response checks on public attributes) judges them,
unchanged. A backend class follows bfcl_eval's conventions: `_load_scenario(config,
long_context=False)` loads its state, every public method is a tool documented in `docs`, and
errors come back as `{"error": ...}`.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from seetjax.envs.bfcl.data import BfclTask
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ToolExecutor
from seetjax.tools.schema import ToolSchema


@dataclasses.dataclass(frozen=True)
class Backend:
    """A simulated API: its class and the JSON docs of its tools (BFCL's doc form)."""

    name: str
    cls: type
    docs: tuple[dict[str, Any], ...]

    def schemas(self) -> tuple[ToolSchema, ...]:
        out = []
        for doc in self.docs:
            order = [p for p in inspect.signature(getattr(self.cls, doc["name"])).parameters
                     if p != "self"]
            out.append(ToolSchema.from_doc(doc, order))
        return tuple(out)

    def new_instance(self, state: Mapping[str, Any]) -> Any:
        instance = self.cls()
        instance._load_scenario(copy.deepcopy(dict(state)))
        return instance


@dataclasses.dataclass(frozen=True, eq=False)
class SimulatedTask(BfclTask):
    """A `BfclTask` over `backends` (by class name) instead of bfcl_eval's classes."""

    backends: Mapping[str, Backend] = dataclasses.field(default_factory=dict)

    @property
    def schemas(self) -> dict[str, ToolSchema]:
        return {s.name: s for b in self.backends.values() for s in b.schemas()}

    def new_executor(self, available: Iterable[str] | None = None,
                     check_types: bool = True) -> ToolExecutor:
        instances = {name: b.new_instance(self.initial_config.get(name, {}))
                     for name, b in self.backends.items()}
        schemas = {name: b.schemas() for name, b in self.backends.items()}
        return ToolExecutor(instances, schemas, available, check_types)


def simulated_task(task_id: str, backend: Backend, state: Mapping[str, Any],
                   turns: Sequence[str], ground_truth: Sequence[Sequence[ToolCall]]
                   ) -> SimulatedTask:
    """A one-backend task: one user message per turn and the calls each turn expects."""
    return SimulatedTask(
        id=task_id, category="base", index=int(task_id.rsplit("_", 1)[1]),
        turns=tuple(({"role": "user", "content": text},) for text in turns),
        ground_truth=tuple(tuple(calls) for calls in ground_truth),
        ground_truth_text=tuple(tuple(c.to_python() for c in calls) for calls in ground_truth),
        involved_classes=(backend.name,), initial_config={backend.name: dict(state)},
        docs=backend.docs, held_out={}, long_context=False, backends={backend.name: backend})
