"""A training run's evaluations at its three milestones: the untrained model, the model after the
SFT warm-up (the start of RL) and the model after RL, so a report separates what the warm-up and
what RL each contributed.

Each milestone holds the greedy figures on the run's training tasks (format validity, turn
accuracy, reward: the rollout statistics of `RolloutResult.stats`) and the BFCL report of each
evaluation split, all in BFCL's own conditions (`EVAL_STAGE`). A split whose tasks are the
training tasks reuses their episodes (greedy decoding makes them the same episodes).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.envs.bfcl_data import BfclTask
from seetjax.eval.evaluate import EVAL_STAGE, redecode, report, split_label
from seetjax.rollout.loop import Policy, Rollout, RolloutResult
from seetjax.train_sync import mean_over_processes

MILESTONES = ("untrained", "after_sft", "after_rl")
LABELS = {"untrained": "untrained", "after_sft": "after SFT (start of RL)",
          "after_rl": "after RL"}
TASK_METRICS = ("format_validity", "checked_turn_accuracy", "turn_accuracy", "reward")


@dataclasses.dataclass(frozen=True)
class Milestone:
    name: str  # one of MILESTONES
    tasks: dict[str, float]  # TASK_METRICS on the training tasks, over all processes
    splits: dict[str, dict[str, Any]]  # split -> SplitReport.to_json()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Milestone:
        return cls(data["name"], dict(data["tasks"]), dict(data["splits"]))

    def renamed(self, name: str) -> Milestone:
        """The same figures under another milestone's name (a run without SFT starts RL from the
        untrained model)."""
        return dataclasses.replace(self, name=name)

    def metrics(self) -> dict[str, float]:
        """Scalars for metrics.jsonl: `eval/train_*` (the training-task curve, which periodic
        evaluations extend) and `eval/bfcl_<split>_overall`; the untrained model's under
        `eval/untrained_*`, as it shares step 0 with the start of RL."""
        prefix = "eval/untrained_" if self.name == "untrained" else "eval/"
        out = {f"{prefix}{'' if self.name == 'untrained' else 'train_'}{k}": v
               for k, v in self.tasks.items()}
        out.update({f"{prefix}bfcl_{metric_name(split)}_overall": r["overall"]
                    for split, r in self.splits.items()})
        return out


def metric_name(label: str) -> str:
    """A report label as a metric-name part: "test (official)" -> "test_official"."""
    return "_".join(re.findall(r"\w+", label))


def evaluate_milestone(name: str, rollout: Rollout, policy: Policy,
                       train_tasks: Sequence[BfclTask],
                       split_tasks: Mapping[str, Sequence[BfclTask]],
                       decodings: Mapping[str, Rollout] | None = None) -> Milestone:
    """One greedy episode per training task and per task of each split (`rollout`'s group size
    should be 1; the policy decides the decoding). With `decodings` (decoding -> a rollout that
    reads replies that way), each split is reported under each of them, labelled (`split_label`):
    episodes played under `rollout`'s decoding are reused where they read the same (`redecode`)."""
    episodes = rollout.episodes(train_tasks, EVAL_STAGE, progress=1.0, seed=0)
    rollout.play(episodes, policy)
    stats = RolloutResult(episodes, [], {}).stats()
    own = rollout.config.env.decoding
    decodings = decodings or {own: rollout}
    splits = {}
    for split, tasks in split_tasks.items():
        if [t.id for t in tasks] == [t.id for t in train_tasks]:
            played = episodes
        else:
            played = rollout.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
            rollout.play(played, policy)
        for decoding, other in decodings.items():
            label = split_label(split, decoding)
            splits[label] = (report(label, played) if decoding == own
                             else redecode(other, policy, played, label)).to_json()
    return Milestone(name, mean_over_processes({k: stats[k] for k in TASK_METRICS}), splits)


def milestone_table(milestones: Sequence[Milestone]) -> str:
    """Markdown: one row per milestone, the training-task figures and each split's BFCL overall
    (in %), then the gains of the SFT warm-up and of RL."""
    splits = list(milestones[0].splits) if milestones else []
    header = ("| | format validity | turn accuracy (checked) | turn accuracy (all) | reward | "
              + "".join(f"BFCL {s} overall | " for s in splits))
    lines = [header.rstrip(), "|---" * (5 + len(splits)) + "|"]

    def row(label: str, tasks: Mapping[str, float], overall: Sequence[float], sign: str) -> str:
        cells = [f"{tasks[k]:{sign}.3f}" for k in TASK_METRICS]
        cells += [f"{100 * v:{sign}.1f}" for v in overall]
        return f"| {label} | " + " | ".join(cells) + " |"

    by_name = {m.name: m for m in milestones}
    for m in milestones:
        lines.append(row(LABELS[m.name], m.tasks, [m.splits[s]["overall"] for s in splits], ""))
    for a, b, label in (("untrained", "after_sft", "gain of SFT"),
                        ("after_sft", "after_rl", "gain of RL")):
        if a in by_name and b in by_name:
            ma, mb = by_name[a], by_name[b]
            lines.append(row(label, {k: mb.tasks[k] - ma.tasks[k] for k in TASK_METRICS},
                             [mb.splits[s]["overall"] - ma.splits[s]["overall"] for s in splits],
                             "+"))
    return "\n".join(lines) + "\n"
