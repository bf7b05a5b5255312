"""Weighted pools of endpoints (`teacher_pool`, `reviewer_pool`) with fallback.

For each scenario a pool gives an order of endpoints to try: the first is drawn by weight from a
generator seeded by (run seed, pool, scenario id), so a rerun draws the same; the fallbacks follow
`preferred_order` (its endpoints first, in that order), then the rest by weight. An endpoint
whose retries are spent (or that refuses with an unfixable error, or whose budget is spent) hands
over to the next one; only when every endpoint failed does the pool fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from seetjax.distill.config import DistillConfig, EndpointSpec
from seetjax.distill.endpoints import (
    BudgetSpent,
    Endpoint,
    EndpointFailed,
    Reply,
    RunBudget,
    Usage,
)


class PoolExhausted(Exception):
    """Every endpoint of a pool failed for one request; `failures` says how, endpoint by endpoint."""

    def __init__(self, pool: str, failures: Sequence[str], budget: bool):
        super().__init__(f"{pool}: every endpoint failed: " + "; ".join(failures))
        self.failures, self.budget = list(failures), budget


class Pool:
    """One pool's endpoints (see the module docstring)."""

    def __init__(self, name: str, specs: Sequence[EndpointSpec], config: DistillConfig,
                 budget: RunBudget, used_before: Mapping[str, Mapping[str, int]] | None = None):
        """`used_before`: endpoint name -> counts of earlier invocations (`usage()`'s form)."""
        self.name, self.seed = name, config.seed
        used_before = used_before or {}
        self.endpoints = [Endpoint(spec, config.retries, budget,
                                   Usage(**used_before.get(spec.name, {}))) for spec in specs]
        self.preferred = [n for n in config.preferred_order if n in {s.name for s in specs}]

    def order(self, key: str) -> list[Endpoint]:
        """Endpoints to try for `key` (a scenario id), first choice first."""
        rng = random.Random(f"{self.seed}:{self.name}:{key}")
        first = rng.choices(self.endpoints, weights=[e.spec.weight for e in self.endpoints])[0]
        by_name = {e.name: e for e in self.endpoints}
        rest = [by_name[n] for n in self.preferred] + sorted(
            self.endpoints, key=lambda e: -e.spec.weight)
        order = [first]
        for endpoint in rest:
            if endpoint not in order:
                order.append(endpoint)
        return order

    async def chat(self, key: str, messages: Sequence[Mapping[str, Any]],
                   tools: Sequence[Mapping[str, Any]] | None = None, **overrides: Any) -> Reply:
        """One request, falling back through `order(key)`; raises PoolExhausted."""
        failures: list[str] = []
        budget = True
        for endpoint in self.order(key):
            try:
                return await endpoint.chat(messages, tools, **overrides)
            except BudgetSpent as e:
                failures.append(str(e))
            except EndpointFailed as e:
                failures.append(str(e))
                budget = False
        raise PoolExhausted(self.name, failures, budget)

    def usage(self) -> dict[str, dict[str, int]]:
        """Per endpoint: requests, failures, retries and tokens of this invocation so far."""
        return {e.name: dataclasses.asdict(e.usage) for e in self.endpoints}

    def spent(self) -> bool:
        return all(e.spent() or e.budget.spent() for e in self.endpoints)

    async def preflight(self) -> None:
        await asyncio.gather(*(e.preflight() for e in self.endpoints))

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.endpoints))
