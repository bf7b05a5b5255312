"""A distillation run: scenarios -> teacher pool -> validation and review -> shard writer.

`concurrency.max_workers` scenarios are in flight at once (asyncio; the work is I/O-bound on the
endpoints). Outcomes are committed in scenario order whatever order they finish in (a window of
scenarios ahead of the oldest unfinished one keeps the workers busy), so deduplication and
shards do not depend on timing. Scenarios whose outcome in the journal is final are skipped;
those rejected for a reason in `retry_failed` are played again. Budgets count every invocation of
the output (`usage.json`): when one is spent no scenario starts any more, and unfinished ones stay
undone for the next run.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import time
from collections.abc import Callable

from seetjax.distill.config import DistillConfig
from seetjax.distill.endpoints import RunBudget
from seetjax.distill.flow import OutOfBudget, distill
from seetjax.distill.pools import Pool
from seetjax.distill.records import Outcome
from seetjax.distill.scenarios import Scenario, scenario_stream
from seetjax.distill.writer import (
    ShardWriter,
    UsageCounts,
    read_usage,
    state_path,
    write_usage,
)

logger = logging.getLogger(__name__)
SUMMARY = "run_summary.json"
WINDOW_PER_WORKER = 4  # scenarios started ahead of the oldest unfinished one, per worker


@dataclasses.dataclass
class RunSummary:
    """What one invocation did (the output's totals are in its journal and `usage.json`)."""

    committed: dict[str, int]  # accepted / rejected / duplicate, this invocation
    reasons: dict[str, int]  # rejection and duplicate reasons, this invocation
    skipped: int  # scenarios whose outcome earlier invocations made final
    retried: int  # scenarios tried again after a failure in an earlier invocation
    undone: int  # scenarios left for a later run (budget)
    seconds: float
    usage: UsageCounts  # this invocation
    total_usage: UsageCounts  # every invocation of this output so far (its usage.json)
    budget_spent: bool

    @property
    def records_per_s(self) -> float:
        return self.committed.get("accepted", 0) / self.seconds if self.seconds else 0.0


def total_usage(before: UsageCounts, pools: list[Pool]) -> UsageCounts:
    """Earlier invocations' usage plus this one's, endpoint by endpoint."""
    total = {pool: {name: dict(counts) for name, counts in endpoints.items()}
             for pool, endpoints in before.items()}
    for pool in pools:
        for name, counts in pool.usage().items():
            into = total.setdefault(pool.name, {}).setdefault(name, {})
            for key, value in counts.items():
                into[key] = into.get(key, 0) + value
    return total


async def run_async(config: DistillConfig,
                    on_outcome: Callable[[Outcome], None] | None = None,
                    allow_rule_change: bool = False) -> RunSummary:
    """Runs `config` to the end of its quotas or budget (see the module docstring). Nothing is
    written before every endpoint answered its check; a rerun under other rules than the
    output's raises RuleChange unless `allow_rule_change`."""
    start = time.perf_counter()
    state = state_path(config.output)
    before = read_usage(state)
    budget = RunBudget(config.budget.max_requests, config.budget.max_tokens)
    for endpoints in before.values():  # the budget is the run's, over all its invocations
        for counts in endpoints.values():
            budget.add(counts["requests"], counts["prompt_tokens"] + counts["completion_tokens"])
    teachers = Pool("teacher_pool", config.teacher_pool, config, budget,
                    before.get("teacher_pool"))
    reviewers = (Pool("reviewer_pool", config.reviewer_pool, config, budget,
                      before.get("reviewer_pool")) if config.review_flow.enabled else None)
    pools = [p for p in (teachers, reviewers) if p is not None]
    try:
        if config.preflight:
            for pool in pools:
                await pool.preflight()
        writer = ShardWriter(config, allow_rule_change)
        try:
            counts = await _commit_all(config, writer, teachers, reviewers,
                                       lambda: write_usage(state, total_usage(before, pools)),
                                       on_outcome)
        finally:
            writer.close()
    finally:
        for pool in pools:
            await pool.close()
    totals = total_usage(before, pools)
    write_usage(state, totals)
    summary = RunSummary(*counts, time.perf_counter() - start, {p.name: p.usage() for p in pools},
                         totals, budget.spent() or any(p.spent() for p in pools))
    (state / SUMMARY).write_text(json.dumps(
        {**dataclasses.asdict(summary), "records_per_s": summary.records_per_s}, indent=1))
    return summary


async def _commit_all(config: DistillConfig, writer: ShardWriter, teachers: Pool,
                      reviewers: Pool | None, save_usage: Callable[[], None],
                      on_outcome: Callable[[Outcome], None] | None
                      ) -> tuple[dict[str, int], dict[str, int], int, int, int]:
    """Every scenario not final in `writer` distilled and committed in scenario order (see the
    module docstring); (committed, reasons, skipped, retried, undone)."""
    committed: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    retried = undone = 0
    window: collections.deque[asyncio.Task] = collections.deque()
    slots = asyncio.Semaphore(config.concurrency.max_workers)
    stop = asyncio.Event()

    async def one(scenario: Scenario) -> Outcome | None:
        async with slots:
            if stop.is_set():
                return None
            try:
                return await distill(scenario, teachers, reviewers, config)
            except OutOfBudget as e:
                logger.warning("budget spent: %s", e)
                stop.set()
                return None

    todo = (s for s in scenario_stream(config.scenarios) if s.id not in writer.done)
    skipped = len(writer.done)
    exhausted = False
    try:
        while window or not exhausted:
            while not exhausted and not stop.is_set() and (
                    len(window) < WINDOW_PER_WORKER * config.concurrency.max_workers):
                scenario = next(todo, None)
                if scenario is None:
                    exhausted = True
                else:
                    window.append(asyncio.create_task(one(scenario)))
            if not window:
                break
            outcome = await window.popleft()
            if outcome is None:
                undone += 1
                continue
            retried += int(outcome.scenario_id in writer.latest)
            outcome = writer.commit(outcome)
            save_usage()
            committed[outcome.status] += 1
            if outcome.reason:
                reasons[outcome.reason] += 1
            if on_outcome is not None:
                on_outcome(outcome)
        undone += sum(1 for _ in todo)
        writer.finish()
    finally:
        for task in window:  # only left after an error: nothing of theirs is committed
            task.cancel()
    return dict(committed), dict(reasons), skipped, retried, undone


def run(config: DistillConfig, allow_rule_change: bool = False) -> RunSummary:
    """`run_async` on a fresh event loop."""
    return asyncio.run(run_async(config, allow_rule_change=allow_rule_change))
