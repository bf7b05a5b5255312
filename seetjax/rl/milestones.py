"""A training run's evaluations at its three milestones: the untrained model, the model after the
SFT warm-up (the start of RL) and the model after RL, so a report separates what the warm-up and
what RL each contributed.

Each milestone holds the greedy figures on the run's training tasks, at most `eval.per_category`
of each category (`first_per_category`; format validity, turn accuracy, reward: the rollout
statistics of `RolloutResult.stats`) and the report of each evaluation split in its environment's
form (`seetjax.eval.reports`: BFCL's, or QA's EM/F1/reward/searches), all in BFCL's own
conditions (`EVAL_STAGE`: no hints or retries). A split whose tasks
are the training tasks reuses their episodes (greedy decoding makes them the same episodes).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from seetjax.envs import registry
from seetjax.eval.evaluate import EVAL_STAGE
from seetjax.eval.reports import split_reports
from seetjax.report.bootstrap import paired_gain
from seetjax.rollout.loop import Rollout
from seetjax.rollout.policy import Policy
from seetjax.rollout.result import RolloutResult
from seetjax.runtime.sync import mean_over_processes

MILESTONES = ("untrained", "after_sft", "after_rl")
LABELS = {"untrained": "untrained", "after_sft": "after SFT (start of RL)",
          "after_rl": "after RL"}
STEP_PREFIX = "step_"  # a periodic evaluation's name: step_<N>, after RL step N


def step_milestone_paths(evals: Path) -> dict[int, Path]:
    """step -> <evals>/step_<step>.json, the periodic held-out evaluations a run kept."""
    return {int(p.stem[len(STEP_PREFIX):]): p for p in evals.glob(f"{STEP_PREFIX}*.json")
            if p.stem[len(STEP_PREFIX):].isdigit()}


def load_step_milestones(evals: Path) -> list[Milestone]:
    """The periodic held-out evaluations kept in `evals`, by step."""
    kept = step_milestone_paths(evals)
    return [Milestone.from_json(json.loads(kept[step].read_text())) for step in sorted(kept)]


def drop_step_milestones(evals: Path, after: int) -> None:
    """Removes the periodic held-out evaluations of steps after `after`: a resumed run evaluates
    them again, and a restarted one may evaluate other splits."""
    for step, path in step_milestone_paths(evals).items():
        if step > after:
            path.unlink()


def milestone_label(name: str) -> str:
    """A milestone's row label in report tables."""
    if name.startswith(STEP_PREFIX):
        return f"after RL step {name[len(STEP_PREFIX):]}"
    return LABELS[name]


TASK_METRICS = ("format_validity", "checked_turn_accuracy", "turn_accuracy", "reward")


@dataclasses.dataclass(frozen=True)
class Milestone:
    name: str  # one of MILESTONES, or step_<N> (a periodic evaluation after RL step N)
    tasks: dict[str, float]  # TASK_METRICS on the training tasks, over all processes
    splits: dict[str, dict[str, Any]]  # split -> its report (`seetjax.eval.reports`)
    env: str = "bfcl"  # the environment whose reports `splits` holds

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Milestone:
        return cls(data["name"], dict(data["tasks"]), dict(data["splits"]),
                   data.get("env", "bfcl"))

    def renamed(self, name: str) -> Milestone:
        """The same figures under another milestone's name (a run without SFT starts RL from the
        untrained model)."""
        return dataclasses.replace(self, name=name)

    def metrics(self) -> dict[str, float]:
        """Scalars for metrics.jsonl: `eval/train_*` (the training-task curve, which periodic
        evaluations extend) and each split's figures, `eval/<env prefix>_<split>_<key>`
        (`eval/bfcl_test_overall`, `eval/qa_test_f1`); the untrained model's under
        `eval/untrained_*`, as it shares step 0 with the start of RL."""
        prefix = "eval/untrained_" if self.name == "untrained" else "eval/"
        out = {f"{prefix}{'' if self.name == 'untrained' else 'train_'}{k}": v
               for k, v in self.tasks.items()}
        reports = split_reports(self.env)
        out.update({f"{prefix}{reports.prefix}_{metric_name(split)}_{key}": r[key]
                    for split, r in self.splits.items() for key in reports.metrics})
        return out


def metric_name(label: str) -> str:
    """A report label as a metric-name part: "test (official)" -> "test_official"."""
    return "_".join(re.findall(r"\w+", label))


def first_per_category(tasks: Sequence[Any], per_category: int) -> list[Any]:
    """The first `per_category` tasks of each category (`task.category`; tasks without one form
    one category), in their order; all of them when `per_category` is 0."""
    if not per_category:
        return list(tasks)
    seen: collections.Counter = collections.Counter()
    kept = []
    for task in tasks:
        category = getattr(task, "category", None)
        seen[category] += 1
        if seen[category] <= per_category:
            kept.append(task)
    return kept


def evaluate_milestone(name: str, rollout: Rollout, policy: Policy, train_tasks: Sequence[Any],
                       split_tasks: Mapping[str, Sequence[Any]],
                       decodings: Mapping[str, Rollout] | None = None) -> Milestone:
    """One greedy episode per training task and per task of each split (`rollout`'s group size
    should be 1; the policy decides the decoding), each split reported in its environment's form
    (`seetjax.eval.reports`). BFCL with `decodings` (decoding -> a rollout that reads replies
    that way): each split under each of them, labelled (`split_label`), episodes played under
    `rollout`'s decoding reused where they read the same (`redecode`)."""
    reports = split_reports(rollout.config.env)
    episodes = rollout.episodes(train_tasks, EVAL_STAGE, progress=1.0, seed=0)
    rollout.play(episodes, policy)
    stats = RolloutResult(episodes, [], {}).stats()
    splits = {}
    for split, tasks in split_tasks.items():
        if [t.id for t in tasks] == [t.id for t in train_tasks]:
            played = episodes
        else:
            played = rollout.episodes(tasks, EVAL_STAGE, progress=1.0, seed=0)
            rollout.play(played, policy)
        splits.update(reports.reports(split, played, rollout, policy, decodings or {}))
    return Milestone(name, mean_over_processes({k: stats[k] for k in TASK_METRICS}), splits,
                     registry.spec_of(rollout.config.env).name)


def milestone_table(milestones: Sequence[Milestone]) -> str:
    """Markdown: one row per milestone, the training-task figures and each split's columns of
    its environment (`SplitReports.columns`: BFCL overall in %, QA EM/F1/reward/searches), then
    the gains of the SFT warm-up and of RL."""
    splits = list(milestones[0].splits) if milestones else []
    columns = split_reports(milestones[0].env).columns if milestones else ()
    cells = [(s, c) for s in splits for c in columns]
    header = ("| | format validity | turn accuracy (checked) | turn accuracy (all) | reward | "
              + "".join(f"{c.header.format(split=s)} | " for s, c in cells))
    lines = [header.rstrip(), "|---" * (5 + len(cells)) + "|"]

    def row(label: str, tasks: Mapping[str, float], values: Sequence[float], sign: str) -> str:
        out = [f"{tasks[k]:{sign}.3f}" for k in TASK_METRICS]
        out += [f"{c.scale * v:{sign}{c.fmt}}" for (_, c), v in zip(cells, values)]
        return f"| {label} | " + " | ".join(out) + " |"

    def values(m: Milestone) -> list[float]:
        return [m.splits[s][c.key] for s, c in cells]

    by_name = {m.name: m for m in milestones}
    for m in milestones:
        lines.append(row(milestone_label(m.name), m.tasks, values(m), ""))
    for a, b, label in (("untrained", "after_sft", "gain of SFT"),
                        ("after_sft", "after_rl", "gain of RL")):
        if a in by_name and b in by_name:
            ma, mb = by_name[a], by_name[b]
            lines.append(row(label, {k: mb.tasks[k] - ma.tasks[k] for k in TASK_METRICS},
                             [y - x for x, y in zip(values(ma), values(mb))], "+"))
    return "\n".join(lines) + "\n" + gain_table(milestones) + change_table(milestones)


def _entry_pairs(before: Milestone, after: Milestone, split: str) -> list[tuple[dict, dict]]:
    """(entry before, entry after) of each task of `split` that both milestones scored."""
    start = {e["id"]: e for e in before.splits.get(split, {}).get("entries", [])}
    return [(start[e["id"]], e) for e in after.splits[split].get("entries", [])
            if e["id"] in start]


def gain_table(milestones: Sequence[Milestone], confidence: float = 0.95) -> str:
    """Markdown: RL's gain (after RL - after SFT) on each split's tasks, per column with
    per-task entries, with its paired percentile-bootstrap interval over the split's tasks
    (`seetjax.report.bootstrap.paired_gain`): whether RL's change is larger than what the choice of
    evaluation tasks alone would give. Empty without both milestones."""
    by_name = {m.name: m for m in milestones}
    if not {"after_sft", "after_rl"} <= set(by_name):
        return ""
    before, after = by_name["after_sft"], by_name["after_rl"]
    reports = split_reports(after.env)
    columns = [c for c in reports.columns if c.entry] + list(reports.gain_columns)
    lines = [f"\nRL's gain per task (after RL - after SFT) with its {confidence:.0%} paired "
             "bootstrap interval over the split's tasks:\n", "| split | tasks | "
             + " | ".join(" ".join(c.header.format(split="").split()) for c in columns) + " |",
             "|---|---" + "|---" * len(columns) + "|"]
    for split in after.splits:
        pairs = _entry_pairs(before, after, split)
        if not pairs:
            continue
        cells = []
        for c in columns:
            if not all(c.entry in e for pair in pairs for e in pair):
                cells.append("-")  # entries written before the figure was (older runs)
                continue
            gain, low, high = paired_gain([float(a[c.entry]) for a, _ in pairs],
                                          [float(b[c.entry]) for _, b in pairs], confidence)
            cells.append(f"{c.scale * gain:+{c.fmt}} [{c.scale * low:+{c.fmt}}, "
                         f"{c.scale * high:+{c.fmt}}]")
        lines.append(f"| {split} | {len(pairs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def change_table(milestones: Sequence[Milestone]) -> str:
    """Markdown: which tasks RL changed, per split and category (entries with a `valid` verdict):
    tasks solved after SFT and after RL, how many RL newly solved and how many it broke, and the
    ways failures ended (`error_type`) whose counts changed, "before -> after". A net gain of 0 can
    be 0 changes or 10 gained and 10 lost; a behaviour RL taught every task alike (retrying a
    failing call until BFCL's step limit ends the episode) shows as one error type growing. Empty
    without both milestones or per-task verdicts."""
    by_name = {m.name: m for m in milestones}
    if not {"after_sft", "after_rl"} <= set(by_name):
        return ""
    rows = []
    for split in by_name["after_rl"].splits:
        categories = collections.defaultdict(list)
        for before, after in _entry_pairs(by_name["after_sft"], by_name["after_rl"], split):
            if "valid" in after:
                categories[after.get("category", "all")].append((before, after))
        for category, group in categories.items():
            solved = [sum(bool(pair[i]["valid"]) for pair in group) for i in (0, 1)]
            gained = sum(not b["valid"] and a["valid"] for b, a in group)
            lost = sum(b["valid"] and not a["valid"] for b, a in group)
            endings = [collections.Counter(pair[i].get("error_type") for pair in group
                                           if not pair[i]["valid"]) for i in (0, 1)]
            moved = "; ".join(f"{kind.split(':')[-1] if kind else 'unstated'} {endings[0][kind]} "
                              f"-> {endings[1][kind]}"
                              for kind in sorted(set(endings[0]) | set(endings[1]), key=str)
                              if endings[0][kind] != endings[1][kind])
            rows.append(f"| {split} | {category} | {len(group)} | {solved[0]} | {solved[1]} | "
                        f"{gained} | {lost} | {moved or '-'} |")
    if not rows:
        return ""
    return "\n".join([
        "\nWhich tasks RL changed (after SFT -> after RL), per split and category, and the ways "
        "failures ended whose counts changed:\n",
        "| split | category | tasks | solved after SFT | solved after RL | newly solved | broken | "
        "failure endings (before -> after) |", "|---" * 8 + "|", *rows]) + "\n"
