"""SEET's stages: what the environment and the fast and slow loops do in each.

1. Format: augmented environment (errors answered with actionable hints), generous retries.
2. Ground-truth interception: augmented; a call that departs from the turn's ground truth is not
   executed, a corrective hint is shown and the model retries; completed turns become anchors.
3. Standard environment (raw errors); the retry probability is annealed linearly from 1.0 to 0.2
   over the stage's training progress; peer and historical anchors feed the slow loop.
4. Standard environment, no retries: the evaluation setting.

Every number is a field; `default_stages()` gives the values above.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from seetjax.errors import invalid

EnvMode = Literal["augmented", "standard"]
TrainingContext = Literal["keep", "mask", "drop"]
ENV_MODES = ("augmented", "standard")
TRAINING_CONTEXTS = ("keep", "mask", "drop")


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """One stage of the curriculum.

    env_mode: "augmented" adds hints to error feedback; "standard" shows the API's raw errors.
    retry_budget: failed steps (format or execution errors) that may be retried per turn.
    retry_probability_start/end: chance that a failed step within budget is retried, annealed
      linearly over the stage's progress (equal values: constant).
    interception: stage-2 ground-truth interception; interception_budget: blocked attempts
      allowed per turn before the model's call is let through; reveal_arguments: the corrective
      hint shows the expected arguments, not only the expected tool.
    order_free: interception follows BFCL's order semantics for a turn (its checker compares the
      end state and the multiset of outputs, not the order of calls): the remaining ground-truth
      calls may come in any order that ends the turn in the same state with the same outputs;
      False: only in the ground truth's own order.
    peer_anchors / historical_anchors / induced_anchors: anchor sources the slow loop may use.
    counterfactual: failed turns with an anchor become counterfactual records.
    feedback_marker: error feedback starts with `[stage N | mode]`, so the policy can tell the
      curriculum phase.
    training_context: what becomes of a failed attempt that was retried or intercepted, and of
      its feedback, in the training sequence. "keep": trained on like any reply (pure on-policy,
      but a successful episode then reinforces its mistakes); "mask": kept in the sequence, so the
      retry is conditioned on it as when it was sampled, but carries no loss; "drop": left out of
      the sequence, and a retried failure's effects on the environment are undone. In every mode
      the attempt stays available as a negative for the counterfactual loss.
    """

    stage: int
    env_mode: EnvMode = "augmented"
    retry_budget: int = 0
    retry_probability_start: float = 1.0
    retry_probability_end: float = 1.0
    interception: bool = False
    interception_budget: int = 3
    reveal_arguments: bool = False
    order_free: bool = True
    peer_anchors: bool = True
    historical_anchors: bool = True
    induced_anchors: bool = True
    counterfactual: bool = True
    feedback_marker: bool = True
    training_context: TrainingContext = "mask"

    def __post_init__(self):
        validate_stage(self)

    @property
    def augmented(self) -> bool:
        return self.env_mode == "augmented"

    def retry_probability(self, progress: float) -> float:
        """Linear annealing over the stage's training progress in [0, 1]."""
        progress = min(max(progress, 0.0), 1.0)
        return (1.0 - progress) * self.retry_probability_start + progress * self.retry_probability_end

    def marker(self) -> str:
        return f"[stage {self.stage} | {self.env_mode}]"


def validate_stage(stage: StageConfig) -> None:
    """Raises ValueError naming the field."""
    where = f"(seet stage {stage.stage})"
    if stage.env_mode not in ENV_MODES:
        raise invalid(stage, "env_mode", stage.env_mode, f"one of {ENV_MODES} {where}")
    if stage.training_context not in TRAINING_CONTEXTS:
        raise invalid(stage, "training_context", stage.training_context,
                      f"one of {TRAINING_CONTEXTS} {where}")
    for name in ("retry_budget", "interception_budget"):
        if getattr(stage, name) < 0:
            raise invalid(stage, name, getattr(stage, name), f"must be >= 0 {where}")
    for name in ("retry_probability_start", "retry_probability_end"):
        if not 0.0 <= getattr(stage, name) <= 1.0:
            raise invalid(stage, name, getattr(stage, name), f"must be in [0, 1] {where}")


# The standard environment with none of SEET's mechanics (no retries, hints, marker, interception
# or slow loop): BFCL's own conditions, where plain RL trains and every evaluation scores.
PLAIN_STAGE = StageConfig(stage=4, env_mode="standard", retry_budget=0, retry_probability_start=0.0,
                          retry_probability_end=0.0, counterfactual=False, feedback_marker=False,
                          peer_anchors=False, historical_anchors=False, induced_anchors=False)


def default_stages() -> tuple[StageConfig, ...]:
    """The four SEET stages with the values of the module docstring."""
    return (
        StageConfig(stage=1, env_mode="augmented", retry_budget=3, peer_anchors=False),
        StageConfig(stage=2, env_mode="augmented", retry_budget=2, interception=True,
                    peer_anchors=False),
        StageConfig(stage=3, env_mode="standard", retry_budget=1, retry_probability_start=1.0,
                    retry_probability_end=0.2, induced_anchors=False),
        StageConfig(stage=4, env_mode="standard", retry_budget=0, retry_probability_start=0.0,
                    retry_probability_end=0.0, induced_anchors=False),
    )
