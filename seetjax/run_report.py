"""A training run's report.md: the three evaluation milestones, the rollouts per stage, and the
final BFCL tables."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seetjax.eval.evaluate import markdown
from seetjax.eval.milestones import Milestone, milestone_table

STAGE_COLUMNS = ("rollout/reward", "rollout/turn_accuracy", "rollout/format_validity",
                 "rollout/retries", "rollout/hints", "rollout/records")


def run_report(name: str, steps: int, seconds: float, milestones: Sequence[Milestone],
               rows: Sequence[dict]) -> str:
    """Markdown of a finished run: `milestones` in order (the last is the final model), `rows`
    the run's metrics.jsonl."""
    lines = [f"# Training report: {name}", "",
             f"{steps} RL steps, {seconds / 60:.1f} min in all.", "",
             "## Greedy evaluations: untrained, after the SFT warm-up, after RL", "",
             "Format validity, turn accuracy (on the turns that expect calls, BFCL's checked "
             "turns, and on all turns) and reward on the training tasks; BFCL overall accuracy "
             "(%) per evaluation split. All in BFCL's own conditions (no hints or retries).", "",
             milestone_table(milestones),
             "## Per stage (rollouts)", "",
             "| stage | steps | reward | turn accuracy | format validity | retries | hints |"
             " records |", "|---|---|---|---|---|---|---|---|"]
    for stage in sorted({r["stage"] for r in rows if r.get("stage") is not None}):
        mine = [r for r in rows if r.get("stage") == stage]
        mean = [np.mean([r[k] for r in mine if r.get(k) is not None] or [0.0])
                for k in STAGE_COLUMNS]
        lines.append(f"| {int(stage)} | {len(mine)} | " + " | ".join(f"{v:.3f}" for v in mean)
                     + " |")
    final = milestones[-1]
    lines += ["", "## BFCL evaluation of the final model (greedy, standard environment)", "",
              markdown(list(final.splits.values())), "![curves](curves.png)", ""]
    return "\n".join(lines)
