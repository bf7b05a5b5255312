"""Where a run's tasks come from: BFCL multi-turn (`load_split`) or the generator
(`seetjax.envs.generated`), behind one `load(split, categories, per_category)`.

Both give `BfclTask`s, so the environment, checker, SEET and the reports apply unchanged. A split
may name its source, `"bfcl:test"` or `"generated:test"`; a bare `"test"` is the run's own
source's. Generated splits: `train` and `validation` draw entities and paraphrases from the
training vocabulary (validation from indices past any training run's, `VALIDATION_START`), `test`
from the disjoint held-out vocabulary (`seetjax.envs.generated.vocab`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from seetjax.config.fields import checked_field
from seetjax.envs.bfcl import splits as bfcl
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask
from seetjax.envs.generated import CLASSES, Difficulty, generate_tasks
from seetjax.errors import invalid

SOURCES = ("bfcl", "generated")
GENERATED_SPLITS = ("train", "validation", "test")
VALIDATION_START = 10**9  # generated validation tasks: the training stream, far past its start


@dataclasses.dataclass(frozen=True)
class TaskSource:
    """kind: "bfcl" or "generated"; the rest describe generated tasks (`generate_tasks`): the
    stream's seed, its difficulty, and the API classes it draws from."""

    kind: str = "bfcl"
    seed: int = 0
    difficulty: Difficulty = Difficulty()
    classes: tuple[str, ...] = CLASSES

    def __post_init__(self):
        if self.kind not in SOURCES:
            raise invalid(self, "kind", self.kind, f"one of {SOURCES}")
        unknown = set(self.classes) - set(CLASSES)
        if not self.classes or unknown:
            raise invalid(self, "classes", self.classes, f"a non-empty subset of {CLASSES}")

    def splits(self, kind: str | None = None) -> tuple[str, ...]:
        return bfcl.SPLITS if (kind or self.kind) == "bfcl" else GENERATED_SPLITS

    def resolve(self, split: str) -> tuple[str, str]:
        """(source, split) of a split name that may carry its source ("bfcl:test")."""
        kind, _, name = split.rpartition(":")
        kind = kind or self.kind
        if kind not in SOURCES:
            raise ValueError(f"{split!r}: unknown task source {kind!r}; one of {SOURCES}")
        if name not in self.splits(kind):
            raise ValueError(f"{split!r}: {kind} splits are {self.splits(kind)}")
        return kind, name

    def check(self, split: str, per_category: int | None) -> None:
        """Fails, saying why, where `load` would."""
        kind, _ = self.resolve(split)
        if kind == "generated" and not per_category:
            raise ValueError(f"{split!r}: generated tasks are unlimited; give a count per "
                             "category (> 0)")

    def load(self, split: str, categories: Iterable[str] = CATEGORIES,
             per_category: int | None = None) -> list[BfclTask]:
        """The tasks of `split`, category by category (the first `per_category` of each)."""
        self.check(split, per_category)
        kind, name = self.resolve(split)
        if kind == "bfcl":
            return bfcl.load_split(name, categories, per_category)
        start = VALIDATION_START if name == "validation" else 0
        vocab_split = "test" if name == "test" else "train"
        return [task for category in categories
                for task in generate_tasks(per_category, seed=self.seed, split=vocab_split,
                                           category=category, difficulty=self.difficulty,
                                           classes=self.classes, start=start)]


def task_source(kind: str, seed: int = 0, min_turns: int = 1, max_turns: int = 4,
                actions_per_turn: int = 2, calls_per_turn: int = 3, classes: int = 2,
                distractor_classes: int = 0, state_size: int = 1, api_classes: str = "",
                named_values: bool = True) -> TaskSource:
    """A `TaskSource` from flat config fields (`data.source`, `data.generated.*`);
    `api_classes`: comma-separated class names ('' = all)."""
    names = tuple(c.strip() for c in api_classes.split(",") if c.strip()) or CLASSES
    difficulty = Difficulty(turns=(min_turns, max_turns), actions_per_turn=actions_per_turn,
                            calls_per_turn=calls_per_turn, classes=classes,
                            distractor_classes=distractor_classes, state_size=state_size,
                            named_values=named_values)
    return TaskSource(kind, seed, difficulty, names)


def parse_categories(text: str) -> tuple[str, ...]:
    """The categories of a comma-separated list (`data.categories`)."""
    return tuple(c.strip() for c in text.split(",") if c.strip())


def load_run_tasks(section: Any, data: Mapping[str, Any], split: str, per_category: int | None
                   ) -> list[BfclTask]:
    """BFCL's task loader in the environment registry: the tasks of `split` under a run config's
    `data` section (`source`, `categories`, `generated`); the env section plays no part."""
    source = task_source(data["source"], **data["generated"])
    return source.load(split, parse_categories(data["categories"]), per_category)


def source_of(data: Mapping[str, Any]) -> TaskSource:
    """The task source of a `data` section (`data.source`, `data.generated`), its fields named."""
    checked_field("data.source", lambda: TaskSource(data["source"]))
    return checked_field("data.generated", lambda: task_source(data["source"], **data["generated"]))


def check_run_data(section: Any, data: Mapping[str, Any], eval_splits: Mapping[str, int]) -> None:
    """BFCL's task-side checks of a run config (`EnvSpec.check_data`): the categories, the
    source, the training split and count, each evaluation split and its count."""
    for c in parse_categories(data["categories"]):
        if c not in CATEGORIES:
            raise invalid("config.data", "categories", data["categories"], f"{c!r} is not one of "
                          f"{CATEGORIES}")
    source = source_of(data)
    checked_field("data.split", lambda: source.resolve(data["split"]))
    checked_field("data.tasks_per_category",
                  lambda: source.check(data["split"], data["tasks_per_category"]))
    for s, count in eval_splits.items():
        checked_field("eval.splits", lambda s=s: source.resolve(s))
        checked_field("eval.per_category", lambda s=s, count=count: source.check(s, count))
