"""The SEET curriculum: which stage is active, its training progress, stage transitions, and the
fast loop's retry decision.

Progress is counted in training steps within the current stage, so stage 3's retry probability
anneals over training, never over the turns of one episode: from its start value on the stage's
first step to its end value on its last. A stage ends after `max_steps`, or earlier once a metric
reaches its threshold (after `min_steps`). The state is a small JSON dict for checkpoints.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.config.fields import as_dataclass
from seetjax.errors import invalid
from seetjax.seet.config import StageConfig

STAGE_KEYS = ("stage1", "stage2", "stage3", "stage4")
# Fields of a `config.seet.stageN` section that are the stage's Transition, not its StageConfig.
TRANSITION_FIELDS = {"steps": "max_steps", "until_metric": "metric", "threshold": "threshold",
                     "min_steps": "min_steps"}


@dataclasses.dataclass(frozen=True)
class Transition:
    """When to leave a stage: after `max_steps` training steps in it (also the length its retry
    probability anneals over), or as soon as `metric` >= `threshold` once `min_steps` have run.
    `max_steps=None` (last stage only): never."""

    max_steps: int | None
    metric: str | None = None
    threshold: float | None = None
    min_steps: int = 0

    def __post_init__(self):
        if self.max_steps is not None and self.max_steps < 1:
            raise invalid(self, "max_steps", self.max_steps, "must be >= 1 or None")
        if (self.metric is None) != (self.threshold is None):
            raise invalid(self, "threshold", self.threshold, f"goes with metric={self.metric!r}: both "
                          "or neither")


def configured_stages(seet: Any) -> tuple[tuple[StageConfig, ...], tuple[Transition, ...]]:
    """The stages and transitions a run's `config.seet` section lays out, from its `start_stage`
    on (each `stageN` section: StageConfig fields plus the TRANSITION_FIELDS); the last stage
    runs until the end. A bad field fails naming it (`config.seet.stage2.steps: ...`)."""
    start = seet.start_stage
    if start not in (1, 2, 3, 4):
        raise invalid("config.seet", "start_stage", start, "must be 1, 2, 3 or 4")
    stages, transitions = [], []
    for key in STAGE_KEYS[start - 1:]:
        section = seet[key].to_dict()
        moves = {TRANSITION_FIELDS[k]: section.pop(k) for k in list(section)
                 if k in TRANSITION_FIELDS}
        stages.append(as_dataclass(StageConfig, section, f"seet.{key}", stage=int(key[-1])))
        moves["metric"] = moves.get("metric") or None
        if moves["metric"] is None:
            moves["threshold"] = None
        moves["max_steps"] = moves.get("max_steps") or None
        transitions.append(as_dataclass(Transition, moves, f"seet.{key}"))
        if key != STAGE_KEYS[-1] and moves["max_steps"] is None and moves["metric"] is None \
                and not seet.single_stage:
            raise invalid(f"config.seet.{key}", "steps", seet[key].steps, "a stage before the "
                             "last needs steps or until_metric, or it would never end")
    transitions[-1] = Transition(None)
    if seet.single_stage:
        return tuple(stages[:1]), (Transition(None),)
    return tuple(stages), tuple(transitions)


def grant_retry(stage: StageConfig, progress: float, retries_used: int,
                rng: random.Random) -> bool:
    """The fast loop's decision for a failed step, taken BEFORE the attempt is counted: a retry is
    possible while `retries_used < retry_budget` (a budget of 1 allows one retry), then happens with
    the stage's annealed probability. The caller counts the retry only when it is granted."""
    if retries_used >= stage.retry_budget:
        return False
    return rng.random() < stage.retry_probability(progress)


class Curriculum:
    """Stages in order, each with the transition that ends it."""

    def __init__(self, stages: Sequence[StageConfig], transitions: Sequence[Transition]):
        if len(stages) != len(transitions) or not stages:
            raise invalid(self, "transitions", len(transitions), f"one per stage ({len(stages)} stages, "
                          ">= 1)")
        if any(t.max_steps is None and t.metric is None for t in transitions[:-1]):
            raise invalid(self, "transitions", transitions, "only the last stage may last forever")
        self.stages = tuple(stages)
        self.transitions = tuple(transitions)
        self.index = 0
        self.steps_in_stage = 0
        self.history: list[dict[str, Any]] = []  # one entry per stage change

    @property
    def stage(self) -> StageConfig:
        return self.stages[self.index]

    @property
    def progress(self) -> float:
        """Training progress of the current stage in [0, 1], read before the step is counted:
        0 on the stage's first step, 1 on its last (step max_steps - 1), so an annealed value
        runs the whole way from its start to its end value; a 1-step stage is at its end (1), a
        stage without max_steps at its start (0). Stays 1 past max_steps (the last stage goes on).
        """
        max_steps = self.transitions[self.index].max_steps
        if max_steps is None:
            return 0.0
        if max_steps == 1:
            return 1.0
        return min(self.steps_in_stage / (max_steps - 1), 1.0)

    def retry_probability(self) -> float:
        return self.stage.retry_probability(self.progress)

    def step(self, metrics: Mapping[str, float] | None = None) -> bool:
        """Counts one training step; moves to the next stage when the current one is over.
        Returns whether the stage changed."""
        self.steps_in_stage += 1
        t = self.transitions[self.index]
        by_steps = t.max_steps is not None and self.steps_in_stage >= t.max_steps
        by_metric = (t.metric is not None and metrics is not None and t.metric in metrics
                     and self.steps_in_stage >= t.min_steps and metrics[t.metric] >= t.threshold)
        if self.index + 1 >= len(self.stages) or not (by_steps or by_metric):
            return False
        self.history.append({"from_stage": self.stage.stage, "steps": self.steps_in_stage,
                             "reason": "max_steps" if by_steps else t.metric})
        self.index += 1
        self.steps_in_stage = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "steps_in_stage": self.steps_in_stage,
                "history": list(self.history)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not 0 <= state["index"] < len(self.stages):
            raise ValueError(f"curriculum state: stage index {state['index']} out of range")
        self.index = int(state["index"])
        self.steps_in_stage = int(state["steps_in_stage"])
        self.history = list(state.get("history", []))
