"""A distillation run: scenarios -> teacher pool -> validation and review -> shard writer.

`concurrency.max_workers` scenarios are in flight at once (asyncio; the work is I/O-bound on the
endpoints). Outcomes are committed in scenario order whatever order they finish in (a window of
scenarios ahead of the oldest unfinished one keeps the workers busy), so deduplication and
shards do not depend on timing. Scenarios already in the journal are skipped. When a budget is
spent no scenario starts any more; unfinished ones stay undone for the next run.
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
from seetjax.distill.writer import ShardWriter, state_path

logger = logging.getLogger(__name__)
SUMMARY = "run_summary.json"
WINDOW_PER_WORKER = 4  # scenarios started ahead of the oldest unfinished one, per worker


@dataclasses.dataclass
class RunSummary:
    """What one invocation did (the output's totals are in its journal)."""

    committed: dict[str, int]  # accepted / rejected / duplicate, this invocation
    reasons: dict[str, int]  # rejection and duplicate reasons, this invocation
    skipped: int  # scenarios done by earlier invocations
    undone: int  # scenarios left for a later run (budget)
    seconds: float
    usage: dict[str, dict[str, dict[str, int]]]  # pool -> endpoint -> counts
    budget_spent: bool

    @property
    def records_per_s(self) -> float:
        return self.committed.get("accepted", 0) / self.seconds if self.seconds else 0.0


async def run_async(config: DistillConfig,
                    on_outcome: Callable[[Outcome], None] | None = None) -> RunSummary:
    """Runs `config` to the end of its quotas or budget (see the module docstring)."""
    start = time.perf_counter()
    writer = ShardWriter(config)
    budget = RunBudget(config.budget.max_requests, config.budget.max_tokens)
    teachers = Pool("teacher_pool", config.teacher_pool, config, budget)
    reviewers = (Pool("reviewer_pool", config.reviewer_pool, config, budget)
                 if config.review_flow.enabled else None)
    pools = [p for p in (teachers, reviewers) if p is not None]
    committed: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    skipped = undone = 0
    window: collections.deque[asyncio.Task] = collections.deque()
    try:
        if config.preflight:
            for pool in pools:
                await pool.preflight()
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
            outcome = writer.commit(outcome)
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
        writer.close()
        for pool in pools:
            await pool.close()
    summary = RunSummary(dict(committed), dict(reasons), skipped, undone,
                         time.perf_counter() - start, {p.name: p.usage() for p in pools},
                         budget.spent() or any(p.spent() for p in pools))
    (state_path(config.output) / SUMMARY).write_text(json.dumps(
        {**dataclasses.asdict(summary), "records_per_s": summary.records_per_s}, indent=1))
    return summary


def run(config: DistillConfig) -> RunSummary:
    """`run_async` on a fresh event loop."""
    return asyncio.run(run_async(config))
