"""BFCL single-turn evaluation of a policy: one reply per task, read as the prompt style reads
replies, judged by `single_turn_checker`, reported in the leaderboard's form.

Reported: accuracy per category and BFCL's aggregates (bfcl_eval's leaderboard formulas) over
the categories evaluated: `non_live_ast`, the unweighted mean of simple, multiple, parallel and
parallel_multiple (BFCL's simple column also averages Java and JavaScript, left out here);
`live_ast`, the mean of the four live AST categories weighted by their sizes; `irrelevance`, the
unweighted mean of irrelevance and live_irrelevance; `relevance`, live_relevance.

Prompts are rendered once with the chat template (`Conversation`, as episodes render theirs);
a task without a reply (its prompt leaves no room for one under the episode limits, or an
endpoint failed) fails, as a turn an episode never reaches does.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.envs.bfcl.single_turn import (
    CATEGORIES,
    IRRELEVANCE,
    LIVE_AST,
    NON_LIVE_AST,
    RELEVANCE,
    SingleTurnTask,
    opening,
    parse_reply,
    underscored_names,
)
from seetjax.envs.bfcl.single_turn_checker import SingleTurnResult, check
from seetjax.eval.evaluate import SplitReport, split_label
from seetjax.models.tokenizer import Tokenizer
from seetjax.rollout.chat import Conversation
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.policy import Policy

SINGLE_TURN = "single-turn"  # the report's row name (with its decoding: "single-turn (official)")
NO_REPLY = "seetjax:no_reply"
AGGREGATES = ("non_live_ast", "live_ast", "irrelevance", "relevance")


def prompts(tasks: Sequence[SingleTurnTask], tokenizer: Tokenizer, config: BfclEnvConfig,
            limits: EpisodeLimits) -> list[tuple[Conversation, int]]:
    """Each task's conversation, holding its prompt in `config`'s style, and the tokens its reply
    may have under `limits` (< 1: no room for one)."""
    conversations = [Conversation(tokenizer, *opening(task, config)) for task in tasks]
    return [(c, min(limits.max_reply_tokens, limits.max_episode_tokens - c.num_tokens - 1))
            for c in conversations]


def generate_replies(tasks: Sequence[SingleTurnTask], policy: Policy, tokenizer: Tokenizer,
                     config: BfclEnvConfig, limits: EpisodeLimits,
                     batch_size: int = 64) -> list[str | None]:
    """The policy's reply to each task's prompt in `config`'s style (None where the prompt
    leaves no room for one), `batch_size` prompts at a time, similar lengths together."""
    prepared = prompts(tasks, tokenizer, config, limits)
    conversations, budgets = [c for c, _ in prepared], [b for _, b in prepared]
    order = sorted((i for i, b in enumerate(budgets) if b >= 1),
                   key=lambda i: conversations[i].num_tokens)
    replies: list[str | None] = [None] * len(tasks)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        policy.start([conversations[i].segments[0].ids for i in rows])
        completions = policy.generate(list(range(len(rows))), [[] for _ in rows],
                                      [budgets[i] for i in rows])
        for i, completion in zip(rows, completions):
            replies[i] = conversations[i].add_reply(completion.tokens, completion.logprobs,
                                                    completion.finish_reason == "stop")
    return replies


def check_replies(tasks: Sequence[SingleTurnTask], replies: Sequence[str | None],
                  config: BfclEnvConfig) -> list[SingleTurnResult]:
    """The verdict on each reply, read with `config`'s call format and decoding."""
    underscore_to_dot = underscored_names(config)
    results = []
    for task, reply in zip(tasks, replies, strict=True):
        if reply is None:
            results.append(SingleTurnResult(task.id, task.category, False, NO_REPLY,
                                            "no reply: the prompt leaves no room for one, or "
                                            "the endpoint failed"))
        else:
            results.append(check(task, parse_reply(task, reply, config), underscore_to_dot))
    return results


@dataclasses.dataclass(frozen=True)
class SingleTurnReport:
    """Verdicts of one evaluation, and their accuracy per category and BFCL's aggregates."""

    label: str
    results: tuple[SingleTurnResult, ...]

    @property
    def total(self) -> dict[str, int]:
        counts = {c: sum(r.category == c for r in self.results) for c in CATEGORIES}
        return {c: n for c, n in counts.items() if n}

    @property
    def correct(self) -> dict[str, int]:
        return {c: sum(r.valid for r in self.results if r.category == c) for c in self.total}

    @property
    def accuracy(self) -> dict[str, float]:
        return {c: self.correct[c] / n for c, n in self.total.items()}

    @property
    def aggregates(self) -> dict[str, float]:
        """BFCL's aggregates (see the module docstring) whose categories were evaluated, each
        over those of its categories that were."""
        accuracy, total = self.accuracy, self.total
        out = {}
        for name, members, weighted in (("non_live_ast", NON_LIVE_AST, False),
                                        ("live_ast", LIVE_AST, True),
                                        ("irrelevance", IRRELEVANCE, False),
                                        ("relevance", RELEVANCE, False)):
            present = [c for c in members if c in accuracy]
            if not present:
                continue
            weights = [total[c] if weighted else 1 for c in present]
            out[name] = sum(accuracy[c] * w for c, w in zip(present, weights)) / sum(weights)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "accuracy": self.accuracy, "correct": self.correct,
                "total": self.total, "aggregates": self.aggregates,
                "entries": [{"id": r.task_id, "valid": r.valid, "error_type": r.error_type}
                            for r in self.results]}


def markdown(reports: Sequence[SingleTurnReport]) -> str:
    """Accuracy (%) per category evaluated, one row per report (the aggregates are in
    `leaderboard_markdown`)."""
    categories = [c for c in CATEGORIES if any(c in r.total for r in reports)]
    lines = ["| single-turn | " + " | ".join(categories) + " | entries |",
             "|---|" + "---|" * (len(categories) + 1)]
    for r in reports:
        cells = [_percent(r.accuracy.get(c)) for c in categories]
        lines.append(f"| {r.label} | " + " | ".join(cells) + f" | {len(r.results)} |")
    return "\n".join(lines) + "\n"


def leaderboard_markdown(decodings: Sequence[str], splits: Sequence[str],
                         single_turn: Sequence[SingleTurnReport],
                         multi_turn: Sequence[SplitReport]) -> str:
    """BFCL's aggregates side by side, one row per decoding: the single-turn ones, then the
    multi-turn overall score of each split evaluated."""
    single = {r.label: r for r in single_turn}
    multi = {r.split: r for r in multi_turn}
    splits = [s for s in splits if any(split_label(s, d) in multi for d in decodings)]
    columns = ["non-live AST", "live AST", "irrelevance", "relevance",
               *(f"multi-turn {s}" for s in splits)]
    lines = ["| decoding | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for d in decodings:
        row = single.get(split_label(SINGLE_TURN, d))
        cells = [_percent(row.aggregates.get(a) if row else None) for a in AGGREGATES]
        cells += [_percent(multi[split_label(s, d)].bfcl.overall
                           if split_label(s, d) in multi else None) for s in splits]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_reports(reports: Sequence[SingleTurnReport], stem: str) -> None:
    """`stem`.single_turn.json: per report, the figures and every entry's verdict."""
    with open(f"{stem}.single_turn.json", "w") as f:
        json.dump([r.to_json() for r in reports], f, indent=2)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"
