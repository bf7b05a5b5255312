"""GET /health: liveness and load (no API key needed, for load balancers and probes)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from seetjax.serving.deps import ServerDep

router = APIRouter(tags=["health"])


@router.get("/health")
async def health(server: ServerDep) -> dict[str, Any]:
    engine = server.engine
    return {"status": "ok", "model": server.config.model_name, "queue": engine.queue_length,
            "max_queue": engine.max_queue, "active_rows": engine.active_rows,
            "max_batch": engine.max_batch, "stats": dataclasses.asdict(engine.stats)}
