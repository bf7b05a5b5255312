"""Each environment's evaluation reports, by environment name: how a split's greedy episodes
become a report (JSON), which of its figures are metrics and milestone-table columns, and the
markdown of the final model's reports. The milestones (`seetjax.rl.milestones`) and report.md
(`seetjax.rl.report`) use them whatever the environment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seetjax.envs import registry
from seetjax.eval.evaluate import markdown, redecode, report, split_label
from seetjax.eval.qa_eval import qa_markdown, qa_report
from seetjax.rollout.episode import Episode
from seetjax.rollout.loop import Rollout
from seetjax.rollout.policy import Policy


@dataclasses.dataclass(frozen=True)
class Column:
    """A milestone-table column per split: the report's `key`, its header (`{split}` filled in),
    shown as `scale * value` in `fmt`; `entry`: the field of the report's per-task entries whose
    mean it is (numbers or booleans), for the paired intervals of gains ('' = none)."""

    key: str
    header: str
    scale: float = 1.0
    fmt: str = ".3f"
    entry: str = ""


@dataclasses.dataclass(frozen=True)
class SplitReports:
    """prefix: of metric names, `eval/<prefix>_<split>_<key>` for each of `metrics`.
    reports: (split, its played episodes, the rollout, the policy, decoding -> rollout) ->
    label -> report JSON. markdown: reports -> the final model's tables. about: what the
    milestone table shows; title: of the final model's section. gain_columns: per-task figures
    shown only in the table of RL's gains (`milestones.gain_table`), after the `columns` that
    have entries."""

    prefix: str
    metrics: tuple[str, ...]
    columns: tuple[Column, ...]
    reports: Callable[[str, Sequence[Episode], Rollout, Policy, Mapping[str, Rollout]],
                      dict[str, dict[str, Any]]]
    markdown: Callable[[Sequence[Mapping[str, Any]]], str]
    about: str
    title: str
    gain_columns: tuple[Column, ...] = ()


def _bfcl_reports(split: str, played: Sequence[Episode], rollout: Rollout, policy: Policy,
                  decodings: Mapping[str, Rollout]) -> dict[str, dict[str, Any]]:
    """The split under each decoding, labelled (`split_label`); episodes played under the
    rollout's own decoding are reused where they read the same (`redecode`)."""
    own = rollout.config.env.decoding
    out = {}
    for decoding, other in (decodings or {own: rollout}).items():
        label = split_label(split, decoding)
        out[label] = (report(label, played) if decoding == own
                      else redecode(other, policy, played, label)).to_json()
    return out


def _qa_reports(split: str, played: Sequence[Episode], rollout: Rollout, policy: Policy,
                decodings: Mapping[str, Rollout]) -> dict[str, dict[str, Any]]:
    return {split: qa_report(split, played)}


BY_ENV = {
    "bfcl": SplitReports(
        "bfcl", ("overall",),
        (Column("overall", "BFCL {split} overall", 100.0, ".1f", entry="valid"),),
        _bfcl_reports, markdown,
        "Format validity, turn accuracy (on the turns that expect calls, BFCL's checked turns, "
        "and on all turns) and reward on the training tasks; BFCL overall accuracy (%) per "
        "evaluation split. All in BFCL's own conditions (no hints or retries).",
        "BFCL evaluation of the final model (greedy, standard environment)",
        # finer than the entry's verdict: RL often fixes some turns of a task before all of them
        (Column("checked_turn_accuracy", "checked-turn accuracy",
                entry="checked_turn_accuracy"),)),
    "qa_search": SplitReports(
        "qa", ("exact_match", "f1", "format", "searches", "search_penalty", "timeout_penalty",
               "reward"),
        (Column("exact_match", "{split} EM", entry="exact_match"), Column("f1", "{split} F1", entry="f1"),
         Column("reward", "{split} reward", entry="reward"),
         Column("searches", "{split} searches", entry="searches")),
        _qa_reports, qa_markdown,
        "Format validity, accuracy and progress reward (both: exact match) on the training "
        "questions; exact match, token F1, the environment's reward and searches per question "
        "on each evaluation split. Greedy, without hints or retries.",
        "QA evaluation of the final model (greedy)"),
}


def split_reports(env: str | Any) -> SplitReports:
    """The reports of an environment: its name, or its section (`config.env`)."""
    name = env if isinstance(env, str) else registry.spec_of(env).name
    if name not in BY_ENV:
        raise ValueError(f"no evaluation reports for environment {name!r}; those with some: "
                         f"{sorted(BY_ENV)}")
    return BY_ENV[name]
