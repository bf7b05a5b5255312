"""Retrieved toolsets at several k: BFCL multi-turn accuracy against the prompt tokens the tool docs
cost, and how often retrieval offers a turn every function its ground truth calls.

A sweep evaluates the same tasks once per k ("all": retrieval off, every tool shown; a number:
`BfclEnvConfig.tool_retrieval` at that k). Per k it reports:
- the BFCL multi-turn overall accuracy of the episodes played;
- mean prompt tokens: what an episode's context spends on the system prompt, the user turns and
  the tool listings, replies and tool results left out (the episode opened turn by turn as if
  every reply called nothing, with the model's tokenizer and chat template): the cost retrieval
  cuts, the same for any model;
- ground-truth recall: over the turns whose ground truth calls functions, the share in which
  every one of them is among the tools offered (model-free, so meaningful even where accuracy
  is near 0).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seetjax.envs.bfcl.data import BfclTask
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.envs.tool_retrieval import offered_docs
from seetjax.eval.evaluate import SplitReport
from seetjax.models.tokenizer import Tokenizer
from seetjax.rollout.chat import Conversation

ALL = "all"


def sweep_configs(env: BfclEnvConfig, mode: str, ks: Sequence[str]) -> dict[str, BfclEnvConfig]:
    """k label -> `env` with retrieval set for it: "all" turns it off, a number is `mode` at
    that k (a bad k or mode fails here, with its field named)."""
    return {k: dataclasses.replace(env, tool_retrieval="off") if k == ALL else
            dataclasses.replace(env, tool_retrieval=mode, tool_retrieval_k=int(k)) for k in ks}


def recall_turns(tasks: Sequence[BfclTask], env: BfclEnvConfig) -> tuple[int, int]:
    """(turns whose ground-truth functions are all offered, turns whose ground truth calls any)."""
    hits = turns = 0
    for task in tasks:
        for turn, calls in enumerate(task.ground_truth):
            if calls:
                offered = {d["name"] for d in offered_docs(task, turn, env.retrieval)}
                turns += 1
                hits += {c.name for c in calls} <= offered
    return hits, turns


def prompt_tokens(task: BfclTask, env: BfclEnvConfig, tokenizer: Tokenizer) -> int:
    """Tokens of the system prompt, user turns and tool listings of an episode of `task` (see the
    module docstring): each turn closed by an empty reply, whose tokens are not counted."""
    bfcl = BfclEnv(env)
    conversation = Conversation(tokenizer, bfcl.reset(task), bfcl.tools)
    while not bfcl.done:
        conversation.add_reply([tokenizer.reply_end_id], [0.0], stopped=True)
        observations = bfcl.step("").observations
        if observations:
            conversation.add_observations(observations)
    return sum(len(s.ids) for s in conversation.segments if s.kind != "reply")


@dataclasses.dataclass(frozen=True)
class SweepRow:
    split: str
    k: str
    overall: float  # BFCL multi-turn overall accuracy of the episodes played
    prompt_tokens: float  # mean per task
    recall: float  # ground-truth recall (the share of turns)
    recall_turns: int  # turns it is over

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sweep_row(split: str, k: str, played: SplitReport, tasks: Sequence[BfclTask],
              env: BfclEnvConfig, tokenizer: Tokenizer) -> SweepRow:
    """The row of one k: `played`, the report of `tasks`' episodes under `env`."""
    hits, turns = recall_turns(tasks, env)
    tokens = sum(prompt_tokens(t, env, tokenizer) for t in tasks) / max(len(tasks), 1)
    return SweepRow(split, k, played.bfcl.overall, tokens, hits / turns if turns else 0.0, turns)


def markdown(rows: Sequence[SweepRow]) -> str:
    """One line per (split, k): accuracy and recall in %, mean prompt tokens."""
    lines = ["| split | k | BFCL overall | mean prompt tokens | GT recall | turns |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.split} | {r.k} | {100 * r.overall:.1f} | {r.prompt_tokens:.0f} | "
              f"{100 * r.recall:.1f} | {r.recall_turns} |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[SweepRow], out: str | Path, title: str = "") -> Path:
    """Accuracy and ground-truth recall against mean prompt tokens, a line per split, each point
    labelled with its k."""
    from seetjax.report.plots import plt, save_figure  # pyplot with the files-only backend

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    for ax, (field, name) in zip(axes.flat, (("overall", "BFCL multi-turn overall (%)"),
                                             ("recall", "ground-truth recall (%)"))):
        for split in dict.fromkeys(r.split for r in rows):
            points = sorted((r.prompt_tokens, 100 * getattr(r, field), r.k)
                            for r in rows if r.split == split)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=4,
                    label=split)
            for x, y, k in points:
                ax.annotate(f"k={k}", (x, y), textcoords="offset points", xytext=(4, 4),
                            fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("mean prompt tokens per episode")
        ax.legend(fontsize=7)
    return save_figure(fig, out, title)


def write(rows: Sequence[SweepRow], stem: str | Path) -> str:
    """`stem`.retrieval.json and `stem`.retrieval.png; returns the markdown table."""
    Path(f"{stem}.retrieval.json").write_text(json.dumps([r.to_json() for r in rows], indent=2))
    plot(rows, f"{stem}.retrieval.png", "tools retrieved per turn: accuracy and recall vs "
         "prompt size")
    return markdown(rows)
