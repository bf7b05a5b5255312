"""The scenario registry: families of scenario templates whose tools really execute offline.

A `ScenarioTemplate` is what a family promises (goal, environment assumptions, tools as JSON
schemas, a rubric, difficulties); a `Scenario` is one drawn instance: its task (initial state,
user-turn script, ground truth) and the template's text. Scenarios are a deterministic stream per
(family, difficulty, seed, pinned params): scenario i of a spec is always the same, so a quota can
be extended later and a rerun skips what is done.

Families shipped: `terminal` (BFCL's GorillaFileSystem), `support` (its ticket and message APIs),
`travel` (its booking API), all generated BFCL-format tasks with their ground truth
(`seetjax.envs.generated`), and `telecom` (a simulated carrier backend, `seetjax.distill.telecom`).
`register_family` adds more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from seetjax.distill.config import ScenarioSpec
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask, load_func_docs
from seetjax.envs.generated import Difficulty, generate_task
from seetjax.envs.generated.vocab import SPLITS
from seetjax.errors import invalid

# A rubric weighs the validators (`seetjax.distill.validators`) into the trace's score.
DEFAULT_RUBRIC: Mapping[str, float] = {"schema": 1.0, "execution": 1.0, "ground_truth": 2.0,
                                       "tool_loops": 0.5, "final_answer": 0.5,
                                       "language_policy": 0.5}

# Generator settings per difficulty name; pinned `params` override any of these fields.
GENERATED_DIFFICULTY: Mapping[str, Difficulty] = {
    "easy": Difficulty(turns=(1, 1), actions_per_turn=1, calls_per_turn=2, classes=1),
    "medium": Difficulty(turns=(1, 3), actions_per_turn=2, calls_per_turn=3, classes=2),
    "hard": Difficulty(turns=(2, 4), actions_per_turn=2, calls_per_turn=3, classes=2,
                       distractor_classes=1, state_size=2),
}


@dataclasses.dataclass(frozen=True)
class ScenarioTemplate:
    """What a family's scenarios share."""

    family: str
    goal: str
    assumptions: tuple[str, ...]
    tools: tuple[dict[str, Any], ...]  # JSON function docs (BFCL's form), all the family may use
    rubric: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_RUBRIC))
    difficulties: tuple[str, ...] = ("easy", "medium", "hard")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One scenario: its template, task (initial state, user-turn script in `task.turns`, ground
    truth) and the spec it came from. `has_ground_truth`: whether the checker can judge it (a
    family without ground truth sets it False and relies on the other validators and review)."""

    id: str
    index: int
    template: ScenarioTemplate
    spec: ScenarioSpec
    task: BfclTask
    has_ground_truth: bool = True

    @property
    def family(self) -> str:
        return self.template.family

    @property
    def difficulty(self) -> str:
        return self.spec.difficulty


class Family:
    """A registered family: its template, the parameters it accepts, and its scenarios."""

    template: ScenarioTemplate
    params: tuple[str, ...] = ()

    def check(self, spec: ScenarioSpec) -> None:
        """Raises ValueError naming a pinned parameter the family does not take or a bad value."""
        unknown = set(spec.params) - set(self.params)
        if unknown:
            raise invalid(spec, "params", spec.params, f"family {spec.family!r} takes "
                          f"{sorted(self.params)}, not {sorted(unknown)}")
        if spec.difficulty not in self.template.difficulties:
            raise invalid(spec, "difficulty", spec.difficulty, f"family {spec.family!r} has "
                          f"{self.template.difficulties}")

    def task(self, spec: ScenarioSpec, index: int) -> BfclTask:
        raise NotImplementedError

    def scenario(self, spec: ScenarioSpec, index: int) -> Scenario:
        task = self.task(spec, index)
        return Scenario(f"{spec.key()}/{index}", index, self.template, spec, task)


FAMILIES: dict[str, Family] = {}


def register_family(name: str) -> Callable[[type[Family]], type[Family]]:
    """Class decorator: registers an instance of the family under `name`."""
    def register(cls: type[Family]) -> type[Family]:
        if name in FAMILIES:
            raise ValueError(f"scenario family {name!r} is registered already")
        FAMILIES[name] = cls()
        return cls
    return register


class GeneratedFamily(Family):
    """Generated BFCL-format tasks on a fixed set of API classes (`seetjax.envs.generated`).

    Pinned params: `categories` (BFCL variants, cycled: base, miss_param, miss_func,
    long_context), `split` (vocabulary: train or test) and any `Difficulty` field."""

    classes: tuple[str, ...] = ()
    params = ("categories", "split", *(f.name for f in dataclasses.fields(Difficulty)))

    def check(self, spec: ScenarioSpec) -> None:
        super().check(spec)
        categories = spec.params.get("categories", ["base"])
        if not categories or set(categories) - set(CATEGORIES):
            raise invalid(spec, "params['categories']", categories,
                          f"a non-empty list of {CATEGORIES}")
        if spec.params.get("split", "train") not in SPLITS:
            raise invalid(spec, "params['split']", spec.params["split"], f"one of {SPLITS}")
        self.difficulty(spec)

    def difficulty(self, spec: ScenarioSpec) -> Difficulty:
        pinned = {k: v for k, v in spec.params.items() if k not in ("categories", "split")}
        if "turns" in pinned:
            pinned["turns"] = tuple(pinned["turns"])
        base = GENERATED_DIFFICULTY[spec.difficulty]
        # A family of one class has no second class to draw.
        pinned.setdefault("classes", min(base.classes, len(self.classes)))
        return dataclasses.replace(base, **pinned)

    def task(self, spec: ScenarioSpec, index: int) -> BfclTask:
        categories = spec.params.get("categories", ["base"])
        category = categories[index % len(categories)]
        return generate_task(index // len(categories), seed=spec.seed,
                             split=spec.params.get("split", "train"), category=category,
                             difficulty=self.difficulty(spec), classes=self.classes)


def _docs(*classes: str) -> tuple[dict[str, Any], ...]:
    return tuple(doc for c in classes for doc in load_func_docs(c))


@register_family("terminal")
class TerminalFamily(GeneratedFamily):
    classes = ("GorillaFileSystem",)
    template = ScenarioTemplate(
        family="terminal",
        goal="Troubleshoot and tidy the user's workspace from a terminal: inspect directories "
             "and files, then create, move, copy, edit or search them as asked.",
        assumptions=("A POSIX-like file system rooted at the user's workspace; the current "
                     "directory persists between calls.",
                     "Only the listed commands exist; paths are relative to the current "
                     "directory."),
        tools=_docs("GorillaFileSystem"))


@register_family("support")
class SupportFamily(GeneratedFamily):
    classes = ("TicketAPI", "MessageAPI")
    template = ScenarioTemplate(
        family="support",
        goal="Work the user's support queue: log in, read, create, edit, resolve and close "
             "tickets, and message colleagues about them.",
        assumptions=("A ticketing system and an internal messenger, each with its own login.",
                     "Ticket ids and user ids come from the user or from earlier results."),
        tools=_docs("TicketAPI", "MessageAPI"))


@register_family("travel")
class TravelFamily(GeneratedFamily):
    classes = ("TravelAPI",)
    template = ScenarioTemplate(
        family="travel",
        goal="Handle the traveller's requests: authenticate, look up airports and fares, book, "
             "insure, cancel and review trips within the card's budget.",
        assumptions=("A booking service that needs an access token from authentication.",
                     "Fares depend on route, date and class; cards have balances."),
        tools=_docs("TravelAPI"))


def scenario_stream(specs: Sequence[ScenarioSpec]) -> Iterator[Scenario]:
    """Every scenario of the run in a fixed order: spec by spec, index 0 .. quota - 1. Scenarios
    are built lazily (a large quota costs nothing up front)."""
    for spec in specs:
        family = FAMILIES[spec.family]
        for index in range(spec.quota):
            yield family.scenario(spec, index)


def scenario_ids(specs: Sequence[ScenarioSpec]) -> list[str]:
    """The ids `scenario_stream` yields, without building the scenarios."""
    return [f"{spec.key()}/{i}" for spec in specs for i in range(spec.quota)]
