"""Where in the SEET curriculum RL's held-out gain is made: runs over seeds, each evaluated on its
held-out split at the start of RL, after every stage that ends and at the end, and the change of
each stage paired by seed with its expanded percentile-bootstrap interval.

Every run needs the periodic held-out evaluations (`train.eval_at_stage_ends=true`,
`train.eval_held_out=true`), e.g. the main job over five seeds:

    for s in 0 1 2 3 4; do python launch/train.py --config=configs/testbed.py \\
        --workdir=runs/stages/s$s --config.seed=$s --config.eval.splits=test@32 \\
        --config.train.eval_at_stage_ends=true --config.train.eval_held_out=true; done
    python experiments/stage_gains/stage_gains.py runs/stages/s* \\
        --out=experiments/stage_gains/results/stage_gains.md

A run's evaluation points: `evals/after_sft.json` (the start of RL), `evals/step_<N>.json` (after
RL step N, labelled with the stage that step ran in) and `evals/after_rl.json` (the end, labelled
with the last step's stage). Two figures per point, BFCL split reports' own: tasks solved (%,
`overall`) and checked-turn accuracy (the mean over categories of `turn_pass_rate`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
from grid import Estimate, bootstrap_mean  # noqa: E402

from seetjax.report.plots import read_metrics  # noqa: E402
from seetjax.rl.milestones import STEP_PREFIX, step_milestone_paths  # noqa: E402

FIGURES = {"tasks solved (%)": lambda s: 100.0 * s["overall"],
           "checked-turn accuracy": lambda s: float(np.mean(list(s["turn_pass_rate"].values())))}


def evaluation_points(run: Path, split: str) -> dict[str, dict]:
    """label -> the split's report at each of `run`'s evaluation points, in order: "start",
    "stage k" (after stage k's last step) and "end". Evaluations within a stage (`eval_every`)
    are left out."""
    stage_of = {int(r["step"]): int(r["stage"]) for r in read_metrics(run / "metrics.jsonl")
                if "stage" in r}
    if not stage_of:
        raise ValueError(f"{run}: no RL steps in metrics.jsonl")
    evals = run / "evals"
    start = evals / "after_sft.json"
    if not start.exists():  # a run without a warm-up starts RL from its untrained model
        start = evals / "untrained.json"
    points = {"start": _split(start, split)}
    for step in sorted(step_milestone_paths(evals)):
        if step not in stage_of:
            raise ValueError(f"{run}: evals/{STEP_PREFIX}{step}.json has no RL step {step} in "
                             "metrics.jsonl")
        if stage_of.get(step + 1, -1) != stage_of[step]:  # the stage's last step
            points[f"stage {stage_of[step]}"] = _split(evals / f"{STEP_PREFIX}{step}.json",
                                                       split)
    points["end"] = _split(evals / "after_rl.json", split)
    return points


def _split(path: Path, split: str) -> dict:
    if not path.exists():
        raise ValueError(f"{path}: missing (was the run made with train.eval_held_out=true?)")
    splits = json.loads(path.read_text())["splits"]
    if split not in splits:
        raise ValueError(f"{path}: no split {split!r} (it has {sorted(splits)})")
    return splits[split]


def stage_table(runs: Sequence[Path], split: str = "test", resamples: int = 10_000) -> str:
    """Markdown: per figure, each run's value at every evaluation point, their mean with its
    interval over runs, and each segment's change (from the point before) paired by run."""
    points = {run: evaluation_points(run, split) for run in runs}
    labels = list(next(iter(points.values())))
    for run, p in points.items():
        if list(p) != labels:
            raise ValueError(f"{run}: evaluation points {list(p)}, others have {labels}")
    lines = []
    for name, figure in FIGURES.items():
        values = np.array([[figure(points[run][label]) for label in labels] for run in runs])
        fmt = ".1f" if "%" in name else ".3f"
        lines += [f"**{name}**, held-out split `{split}`, {len(runs)} runs", "",
                  "| run | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
        lines += [f"| {run.name} | " + " | ".join(f"{v:{fmt}}" for v in row) + " |"
                  for run, row in zip(runs, values)]
        mean = [bootstrap_mean(values[:, i], resamples) for i in range(len(labels))]
        change = [Estimate(float("nan"), float("nan"), float("nan"), 0)] + [
            bootstrap_mean(values[:, i] - values[:, i - 1], resamples)
            for i in range(1, len(labels))]
        lines += ["| mean [95%] | " + " | ".join(e.cell(fmt) for e in mean) + " |",
                  "| change from the point before [95%] | "
                  + " | ".join(e.cell("+" + fmt) for e in change) + " |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run workdirs (one per seed)")
    parser.add_argument("--split", default="test", help="the held-out split's report name")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    table = stage_table(sorted(args.runs), args.split, args.resamples)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
