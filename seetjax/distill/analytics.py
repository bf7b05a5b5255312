"""Analytics & QA of a distillation output: report.md and PNGs.

Read from the journal (every scenario's outcome, rejected ones with their traces) and
`usage.json`: coverage by family and difficulty, acceptance rate and drop reasons, score
distribution, teacher and reviewer usage shares, requests and tokens per endpoint over every
invocation of the run, token lengths, language mix, and a seeded random spot-check sample of
accepted traces to read by hand (`docs/qa_checklist.md` says what to look for).
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from typing import Any

from seetjax.distill.language import language_mix
from seetjax.distill.records import Outcome
from seetjax.distill.review import render_trace
from seetjax.distill.writer import read_outcomes, read_usage


def statistics(outcomes: list[Outcome]) -> dict[str, Any]:
    """Everything the report shows, as plain data (also written as stats.json)."""
    by_status = collections.Counter(o.status for o in outcomes)
    reasons = collections.Counter(o.reason for o in outcomes if o.reason)
    coverage: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    accepted = [o.record for o in outcomes if o.status == "accepted"]
    for o in outcomes:
        family, difficulty = o.scenario_id.split("/")[:2]
        coverage[f"{family}/{difficulty}"][o.status] += 1
    teachers = collections.Counter(r.metadata.generation.teacher.endpoint for r in accepted)
    reviewers = collections.Counter(
        round_.reviewer_endpoint for r in accepted for round_ in r.metadata.generation.review_rounds
        if round_.reviewer_endpoint)
    rounds = collections.Counter(len(r.metadata.generation.review_rounds) for r in accepted)
    languages = collections.Counter(
        language_mix([t.content for t in r.turns if t.role == "assistant"]).dominant
        for r in accepted)
    rejected = [o.record for o in outcomes if o.status == "rejected" and o.record is not None]
    return {
        "outcomes": len(outcomes), "by_status": dict(by_status),
        "acceptance_rate": by_status["accepted"] / len(outcomes) if outcomes else 0.0,
        "reasons": dict(reasons.most_common()),
        "coverage": {k: dict(v) for k, v in sorted(coverage.items())},
        "teacher_shares": _shares(teachers), "reviewer_shares": _shares(reviewers),
        "rounds_per_accepted": dict(sorted(rounds.items())),
        "scores": {"accepted": [r.metadata.score for r in accepted],
                   "rejected": [r.metadata.score for r in rejected]},
        "completion_tokens": [r.metadata.completion_tokens for r in accepted],
        "english_share": [r.metadata.language_policy.english_share for r in accepted],
        "narrative_languages": dict(languages.most_common()),
        "chinese_summary_rate": (sum(r.metadata.language_policy.chinese_summary_present
                                     for r in accepted) / len(accepted) if accepted else 0.0),
    }


def _shares(counts: collections.Counter[str]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: round(v / total, 4) for k, v in counts.most_common()} if total else {}


def _plots(stats: dict[str, Any], out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    fig, ax = plt.subplots(figsize=(7, 3.5))
    groups = list(stats["coverage"])
    bottom = [0] * len(groups)
    for status in ("accepted", "rejected", "duplicate"):
        values = [stats["coverage"][g].get(status, 0) for g in groups]
        ax.bar(groups, values, bottom=bottom, label=status)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("scenarios")
    ax.set_title("coverage by family / difficulty")
    ax.legend()
    ax.tick_params(axis="x", rotation=30)
    made.append(_save(fig, out / "coverage.png"))
    for name, title, data in (
            ("scores.png", "scores (accepted vs rejected)", stats["scores"]),
            ("tokens.png", "completion tokens per accepted trace",
             {"accepted": stats["completion_tokens"]}),
            ("language.png", "English share of the narrative (accepted)",
             {"accepted": stats["english_share"]})):
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for label, values in data.items():
            if values:
                ax.hist(values, bins=20, alpha=0.6, label=label)
        ax.set_title(title)
        ax.legend()
        made.append(_save(fig, out / name))
    return made


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _table(rows: dict[str, Any], head: tuple[str, str]) -> list[str]:
    return [f"| {head[0]} | {head[1]} |", "|---|---|",
            *(f"| {k} | {v} |" for k, v in rows.items())] if rows else ["(none)"]


def write_report(state_dir: str | Path, out_dir: str | Path, spot_checks: int = 5,
                 seed: int = 0) -> Path:
    """report.md, stats.json and PNGs of the run whose journal is in `state_dir`."""
    state, out = Path(state_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = read_outcomes(state)
    stats = {**statistics(outcomes), "usage": read_usage(state)}
    (out / "stats.json").write_text(json.dumps(stats, indent=1, ensure_ascii=False))
    pictures = _plots(stats, out) if outcomes else []
    accepted = [o.record for o in outcomes if o.status == "accepted"]
    sample = random.Random(seed).sample(accepted, min(spot_checks, len(accepted)))
    lines = [f"# Distillation report: {state}", "",
             f"{stats['outcomes']} scenarios: {stats['by_status']}; acceptance rate "
             f"{stats['acceptance_rate']:.1%}; Chinese summary in "
             f"{stats['chinese_summary_rate']:.0%} of accepted traces; dominant narrative "
             f"language {stats['narrative_languages']}.", "",
             "## Coverage (family/difficulty)", "",
             "| group | accepted | rejected | duplicate |", "|---|---|---|---|",
             *(f"| {g} | {c.get('accepted', 0)} | {c.get('rejected', 0)} | "
               f"{c.get('duplicate', 0)} |" for g, c in stats["coverage"].items()), "",
             "## Drop reasons", "", *_table(stats["reasons"], ("reason", "scenarios")), "",
             "## Teacher and reviewer usage", "",
             *_table(stats["teacher_shares"], ("teacher endpoint", "share of accepted")), "",
             *_table(stats["reviewer_shares"], ("reviewer endpoint", "share of reviews")), "",
             *_table({k: json.dumps(v) for k, v in stats["usage"].items()},
                     ("pool", "requests / failures / retries / tokens per endpoint (all runs)")),
             "", *(f"![{p}]({p})" for p in pictures), "",
             f"## Spot checks ({len(sample)} random accepted traces, seed {seed})", ""]
    for record in sample:
        lines += [f"### {record.id} (score {record.metadata.score:g})", "", "```",
                  render_trace(record.turns), "```", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
