"""BFCL multi-turn evaluation of a policy: accuracy per category in the leaderboard's form, the
overall score (unweighted mean of the four categories), and the agent metrics.

Episodes run in the standard environment with no retries, no hints and no interception (SEET's
stage 4); the policy decides the decoding (greedy by default in `launch/evaluate.py`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.envs.bfcl.checker import BfclReport, EntryResult, entry_result, summarize
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.eval.agent_metrics import AgentMetrics, agent_metrics
from seetjax.rollout.episode import Episode
from seetjax.rollout.loop import Rollout
from seetjax.rollout.policy import Policy
from seetjax.seet.config import PLAIN_STAGE, StageConfig
from seetjax.tools.calls import ParseError

# BFCL's own conditions: raw API errors, no retries, no marker, nothing intercepted. Every
# evaluation uses it, so runs of any configuration (SEET or not) are scored alike.
EVAL_STAGE = PLAIN_STAGE


@dataclasses.dataclass(frozen=True)
class SplitReport:
    split: str
    bfcl: BfclReport
    agent: AgentMetrics
    entries: tuple[EntryResult, ...]

    def to_json(self) -> dict[str, Any]:
        b = self.bfcl
        return {"split": self.split, "overall": b.overall, "complete": b.complete,
                "accuracy": b.accuracy, "correct": b.correct, "total": b.total,
                "turn_pass_rate": b.turn_pass_rate, "agent": self.agent.as_dict(),
                "entries": [{"id": e.task_id, "category": e.category, "valid": e.valid,
                             "error_type": e.error_type, "checked_turn_accuracy": e.turn_accuracy}
                            for e in self.entries]}


def evaluate_tasks(rollout: Rollout, policy: Policy, tasks: Sequence[BfclTask], split: str,
                   stage: StageConfig = EVAL_STAGE) -> SplitReport:
    """One episode per task (the rollout's group size should be 1)."""
    episodes = rollout.episodes(tasks, stage, progress=1.0, seed=0)
    rollout.play(episodes, policy)
    return report(split, episodes)


def split_label(split: str, decoding: str) -> str:
    """A report row's name: the split, with its decoding unless it is the default (lenient):
    "test", "test (official)"."""
    return split if decoding == "lenient" else f"{split} ({decoding})"


def reads_the_same(episode: Episode, config: BfclEnvConfig) -> bool:
    """Whether every reply of a finished episode reads to the same calls under `config`'s
    decoding as under its own (neither a format error): played greedily under `config`, the
    episode would then be the same episode, reply for reply."""
    if episode.error is not None:
        return False
    schemas = episode.env.schemas
    for message in episode.env.history:
        if message["role"] != "assistant":
            continue
        ours = episode.env.config.parse_calls(message["content"], schemas)
        theirs = config.parse_calls(message["content"], schemas)
        if isinstance(ours, ParseError) or isinstance(theirs, ParseError) or ours != theirs:
            return False
    return True


def redecode(rollout: Rollout, policy: Policy, episodes: Sequence[Episode],
             split: str) -> SplitReport:
    """The report of `episodes`' tasks under `rollout`'s decoding, for a greedy `policy`: an
    episode that `reads_the_same` is reused, the others are played again."""
    again = [i for i, e in enumerate(episodes) if not reads_the_same(e, rollout.config.env)]
    replayed = rollout.episodes([episodes[i].task for i in again], EVAL_STAGE, progress=1.0,
                                seed=0)
    rollout.play(replayed, policy)
    merged = list(episodes)
    for i, episode in zip(again, replayed):
        merged[i] = episode
    return report(split, merged)


def report(split: str, episodes: Sequence[Episode]) -> SplitReport:
    """The report of finished episodes."""
    traces = [e.trace() for e in episodes]  # marked truncated when the context filled up
    # A turn the episode never reached (cut by a token cap) fails the entry.
    results = [entry_result(e.task, trace.verdicts) for e, trace in zip(episodes, traces)]
    return SplitReport(split, summarize(results), agent_metrics(traces, results), tuple(results))


def markdown(reports: Sequence[SplitReport | Mapping[str, Any]]) -> str:
    """The leaderboard table (accuracy in %) and the agent metrics, one row per split; each report
    a SplitReport or its `to_json()`."""
    rows = [r.to_json() if isinstance(r, SplitReport) else r for r in reports]
    lines = ["| split | overall | " + " | ".join(CATEGORIES) + " | entries |",
             "|---|---|" + "---|" * len(CATEGORIES) + "---|"]
    for r in rows:
        cells = [f"{100 * r['accuracy'][c]:.1f}" if c in r["accuracy"] else "-"
                 for c in CATEGORIES]
        lines.append(f"| {r['split']} | {100 * r['overall']:.1f} | " + " | ".join(cells)
                     + f" | {sum(r['total'].values())} |")
    names = list(AgentMetrics.__dataclass_fields__)
    lines += ["", "| split | " + " | ".join(n.replace("_", " ") for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for r in rows:
        lines.append(f"| {r['split']} | " + " | ".join(f"{r['agent'][n]:.3f}" for n in names)
                     + " |")
    return "\n".join(lines) + "\n"


def write_reports(reports: Sequence[SplitReport], stem: str) -> None:
    """`stem`.md and `stem`.json."""
    with open(f"{stem}.md", "w") as f:
        f.write(markdown(reports))
    with open(f"{stem}.json", "w") as f:
        json.dump([r.to_json() for r in reports], f, indent=2)
