"""Training curves from `metrics.jsonl`: one PNG with a panel per quantity, stages shaded."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("rollout/reward",)),
    ("checked turns: accuracy, and failed silent", ("rollout/checked_turn_accuracy",
                                                    "eval/train_checked_turn_accuracy",
                                                    "eval/untrained_checked_turn_accuracy",
                                                    "rollout/silent_turns")),
    ("format validity", ("rollout/format_validity", "eval/train_format_validity",
                         "eval/untrained_format_validity")),
    ("BFCL overall (greedy eval)", ("eval/bfcl_train_overall", "eval/bfcl_test_overall",
                                    "eval/bfcl_test_official_overall",
                                    "eval/untrained_bfcl_train_overall",
                                    "eval/untrained_bfcl_test_overall")),
    ("QA: F1 and searches per question", ("rollout/env_f1", "rollout/env_searches",
                                          "eval/qa_test_f1", "eval/qa_test_searches",
                                          "eval/untrained_qa_test_f1",
                                          "eval/untrained_qa_test_searches")),
    ("retries and hints per episode", ("rollout/retries", "rollout/hints",
                                       "rollout/interceptions")),
    ("anchors used, by source", ("rollout/anchors_peer", "rollout/anchors_historical",
                                 "rollout/anchors_induced")),
    ("loss", ("learner/loss", "learner/cf_nll", "learner/coordinator_loss",
              "learner/worker_loss")),
)


def read_metrics(path: str | os.PathLike) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def present_panels(rows: Sequence[dict]) -> list[tuple[str, list[str]]]:
    """The panels of PANELS with the series that have at least one value in `rows`."""
    panels = [(name, [k for k in keys if any(r.get(k) is not None for r in rows)])
              for name, keys in PANELS]
    return [(name, keys) for name, keys in panels if keys]


def plot_curves(rows: Sequence[dict], out: str | os.PathLike, title: str = "") -> Path:
    """Writes the panels of PANELS whose series appear in `rows` (skipping empty ones)."""
    panels = present_panels(rows)
    columns = 3
    lines = max(1, -(-len(panels) // columns))
    fig, axes = plt.subplots(lines, columns, figsize=(5 * columns, 3.2 * lines), squeeze=False)
    stages = [(r["step"], r["stage"]) for r in rows if r.get("stage") is not None]
    for ax, (name, keys) in zip(axes.flat, panels):
        _shade_stages(ax, stages)
        for key in keys:
            points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            label = key.split("/", 1)[-1].replace("_", " ")
            if key.startswith("eval/untrained_"):
                # The untrained model shares step 0 with the start of RL (after SFT).
                ax.plot(*zip(*points), linestyle="none", marker="x", markersize=7, color="0.3",
                        label=label.removeprefix("untrained ") + " (untrained model)")
            elif key.startswith("eval/"):
                # Greedy evaluations are sparse (step 0: after the SFT warm-up, the start of
                # RL): dashed, so the line between them does not read as a measured curve.
                ax.plot(*zip(*points), linestyle="--", marker="s", markersize=5,
                        label=label + " (greedy eval; step 0 = after SFT)")
            else:
                ax.plot(*zip(*points), marker="o" if len(points) < 30 else None, markersize=3,
                        label=label + (" (rollouts)" if key.startswith("rollout/") else ""))
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    return save_figure(fig, out, title)


def save_figure(fig, out: str | os.PathLike, title: str = "") -> Path:
    """Titles, lays out, writes `fig` to `out` (PNG at 110 dpi) and closes it."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _shade_stages(ax, stages: Sequence[tuple[int, float]]) -> None:
    """Alternating background bands, one per stage, labelled at the top."""
    if not stages:
        return
    bands, start, current = [], stages[0][0], stages[0][1]
    for step, stage in stages[1:]:
        if stage != current:
            bands.append((start, step, current))
            start, current = step, stage
    bands.append((start, stages[-1][0] + 1, current))
    for i, (a, b, stage) in enumerate(bands):
        ax.axvspan(a, b, color="0.93" if i % 2 == 0 else "0.98", zorder=0)
        ax.text((a + b) / 2, 0.98, f"S{int(stage)}", transform=ax.get_xaxis_transform(),
                ha="center", va="top", fontsize=7, color="0.4")
