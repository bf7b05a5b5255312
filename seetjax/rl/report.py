"""A training run's report.md: the three evaluation milestones, the rollouts per stage, and the
final model's tables in its environment's form (`seetjax.eval.reports`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seetjax.eval.reports import split_reports
from seetjax.rl.alarms import alarm_lines
from seetjax.rl.milestones import Milestone, milestone_table

STAGE_COLUMNS = ("rollout/reward", "rollout/turn_accuracy", "rollout/format_validity",
                 "rollout/retries", "rollout/hints", "rollout/records")


def run_report(name: str, steps: int, seconds: float, milestones: Sequence[Milestone],
               rows: Sequence[dict]) -> str:
    """Markdown of a finished run: `milestones` in order (the last is the final model), `rows`
    the run's metrics.jsonl."""
    final = milestones[-1]
    reports = split_reports(final.env)
    lines = [f"# Training report: {name}", "",
             f"{steps} RL steps, {seconds / 60:.1f} min in all.", "",
             "## Greedy evaluations: untrained, after the SFT warm-up, (after RL steps with "
             "held-out evaluations,) after RL", "",
             reports.about, "", milestone_table(milestones),
             "## Per stage (rollouts)", "",
             "| stage | steps | reward | turn accuracy | format validity | retries | hints |"
             " records |", "|---|---|---|---|---|---|---|---|"]
    for stage in sorted({r["stage"] for r in rows if r.get("stage") is not None}):
        mine = [r for r in rows if r.get("stage") == stage]
        mean = [np.mean([r[k] for r in mine if r.get(k) is not None] or [0.0])
                for k in STAGE_COLUMNS]
        lines.append(f"| {int(stage)} | {len(mine)} | " + " | ".join(f"{v:.3f}" for v in mean)
                     + " |")
    lines += role_table(rows)
    lines += time_table(rows)
    lines += alarm_lines(rows)
    lines += ["", f"## {reports.title}", "", reports.markdown(list(final.splits.values())),
              "![curves](curves.png)", ""]
    return "\n".join(lines)


# role -> its rollout metrics: reward, format validity, EM (the team's answer, a worker's
# sub-answer), and per team (coordinator replies, workers)
ROLE_COLUMNS = {
    "coordinator": ("reward", "format_validity", "exact_match", "rounds"),
    "worker": ("reward", "format_validity", "sub_answer_em", "per_team"),
}


def role_table(rows: Sequence[dict]) -> list[str]:
    """Markdown lines: each role's rollout means over the RL steps of a multi-agent run
    (`seetjax.rollout.multi_agent`), and where each role trains its own parameters
    (`multi_agent.separate_params`) its updates and their mean loss; empty for other runs."""
    steps = [r for r in rows if r.get("rollout/coordinator_reward") is not None]
    if not steps:
        return []
    separate = any(f"learner/{role}_{k}" in r for r in steps for role in ROLE_COLUMNS
                   for k in ("loss", "no_signal"))
    lines = ["", "## Per role (multi-agent rollouts)", "",
             "| role | reward | format validity | EM (answer / sub-answer) | per team "
             "(replies / workers) |" + (" updates | loss |" if separate else ""),
             "|---|---|---|---|---|" + ("---|---|" if separate else "")]
    for role, columns in ROLE_COLUMNS.items():
        means = [np.mean([r[f"rollout/{role}_{c}"] for r in steps]) for c in columns]
        row = f"| {role} | " + " | ".join(f"{v:.3f}" for v in means) + " |"
        if separate:
            losses = [r[f"learner/{role}_loss"] for r in steps if f"learner/{role}_loss" in r]
            row += f" {len(losses)} | " + (f"{np.mean(losses):.4f} |" if losses else "- |")
        lines.append(row)
    return lines


# (metric, what it covers) of an RL step's wall time, in the order the step spends it
TIME_PARTS = (
    ("time/rollout_sampling_s", "sampling (prefill, decode, host transfers)"),
    ("time/rollout_environment_s", "environment (parsing, tools, checking, tokenising)"),
    ("time/rollout_slow_loop_s", "slow loop (anchors, counterfactual records)"),
    ("time/batch_s", "TrajectoryBatch assembly"),
    ("time/learn_s", "learner update"),
    ("time/eval_s", "periodic evaluation"),
)


def time_table(rows: Sequence[dict]) -> list[str]:
    """Markdown lines: mean seconds per RL step of each part of the step, with its share, and
    the share of decoding spent on rows whose reply had ended (the lock-step batch's idle
    share). Empty when no row has the timings."""
    steps = [r for r in rows if r.get("time/learn_s") is not None]
    if not steps:
        return []
    means = [(what, sum(r.get(k, 0.0) for r in steps) / len(steps)) for k, what in TIME_PARTS]
    total = sum(m for _, m in means) or 1.0
    idle = np.mean([r.get("time/rollout_idle_share", 0.0) for r in steps])
    return ["", "## Where an RL step's time went", "",
            f"Mean over {len(steps)} steps; decoding spent {idle:.0%} of its row-steps on rows "
            "whose reply had already ended.", "", "| part | s per step | share |", "|---|---|---|",
            *(f"| {what} | {m:.2f} | {m / total:.0%} |" for what, m in means),
            *step_figures_table(steps)]


def _mean(rows: Sequence[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else None


def step_figures_table(steps: Sequence[dict]) -> list[str]:
    """Markdown lines: the RL steps' rates (means), the device memory's peak (the largest) and
    the programs compiled by the last step, each "n/a" with the reason where not measured."""
    rollout, update = _mean(steps, "time/rollout_tokens_per_s"), _mean(steps, "learner/tokens_per_s")
    mfu = _mean(steps, "learner/mfu")
    peaks = [r["device/peak_memory_gib"] for r in steps if r.get("device/peak_memory_gib")]
    last = steps[-1]
    cells = ("n/a" if rollout is None else f"{rollout:,.0f}",
             "n/a" if update is None else f"{update:,.0f}",
             "n/a (peak FLOP/s of the device unknown)" if mfu is None else f"{mfu:.1%}",
             f"{max(peaks):.1f} GiB" if peaks else "n/a (no memory figures from the backend: the CPU)",
             f"{last['compile/learner']:.0f} / {last['compile/sampler']:.0f}"
             if "compile/learner" in last else "n/a")
    return ["", "| rollout tokens/s | update tokens/s | update MFU | peak device memory "
            "| programs compiled (learner / sampler) |", "|---|---|---|---|---|",
            "| " + " | ".join(cells) + " |"]
