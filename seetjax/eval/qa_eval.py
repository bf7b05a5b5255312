"""QA search evaluation: exact match, token F1, the reward and each of its parts, and searches
per question, from finished episodes of an environment that scores its own episodes
(`ScoresEpisodes`, the QA search environment's `reward.qa_reward`).

An episode the rollout cut off (its context full) is scored as a timeout, as in training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seetjax.rollout.episode import Episode

# reward part -> its name in reports: means over the split's episodes
PARTS = {"exact_match": "EM", "f1": "F1", "format": "format", "searches": "searches",
         "search_penalty": "search penalty", "timeout_penalty": "timeout penalty",
         "total": "reward"}


def qa_report(split: str, episodes: Sequence[Episode]) -> dict[str, Any]:
    """The report of finished episodes (JSON-ready): each part's mean (`total` as `reward`),
    exact match per number of hops, the share cut off, and one entry per episode: its question,
    gold answers, the answer the policy gave (None: it gave none) and its reward parts."""
    if not episodes:
        raise ValueError(f"qa_report({split!r}): no episodes")
    parts = [e.env_reward() for e in episodes]
    out: dict[str, Any] = {"split": split, "episodes": len(episodes)}
    out.update({_key(k): float(np.mean([p[k] for p in parts])) for k in PARTS})
    hops: dict[int, list[float]] = {}
    for e, p in zip(episodes, parts):
        hops.setdefault(len(e.task.hops), []).append(p["exact_match"])
    out["exact_match_by_hops"] = {str(h): float(np.mean(v)) for h, v in sorted(hops.items())}
    out["truncated"] = float(np.mean([e.truncated for e in episodes]))
    out["entries"] = [{"id": e.task_id, "question": e.task.question,
                       "answers": list(e.task.answers), "answered": e.env.answered,
                       "exact_match": p["exact_match"], "f1": p["f1"],
                       "searches": p["searches"], "reward": p["total"]}
                      for e, p in zip(episodes, parts)]
    return out


def qa_markdown(reports: Sequence[Mapping[str, Any]]) -> str:
    """One row per split report: each part's mean, then exact match by hops."""
    names = list(PARTS.values())
    lines = ["| split | questions | " + " | ".join(names) + " | EM by hops |",
             "|---|---|" + "---|" * len(names) + "---|"]
    for r in reports:
        by_hops = ", ".join(f"{h}: {v:.2f}" for h, v in r["exact_match_by_hops"].items())
        lines.append(f"| {r['split']} | {r['episodes']} | "
                     + " | ".join(f"{r[_key(k)]:.3f}" for k in PARTS) + f" | {by_hops} |")
    return "\n".join(lines) + "\n"


def _key(part: str) -> str:
    return "reward" if part == "total" else part
