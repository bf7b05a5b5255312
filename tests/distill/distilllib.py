"""Helpers of the distillation tests: run configs, and live local endpoints on 127.0.0.1."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any

from seetjax.distill.config import DistillConfig
from seetjax.distill.load import parse_config
from seetjax.distill.scenarios import scenario_stream
from seetjax.distill.servers import Oracle, oracle_app
from tests.serving.servinglib import LiveServer

GENERATED = {"categories": ["base", "miss_param", "miss_func"]}


def raw_config(out, scenarios: Sequence[dict[str, Any]] | None = None,
               teachers: Sequence[dict[str, Any]] | None = None, **sections: Any
               ) -> dict[str, Any]:
    """A run config as YAML would give it: `out` for shards, an oracle teacher by default."""
    raw = {"run_name": "test", "output": {"url": str(out), "formats": ["jsonl", "parquet"],
                                          "shard_size": 8},
           "scenarios": list(scenarios or [{"family": "telecom", "quota": 4}]),
           "teacher_pool": list(teachers or [endpoint("oracle", "http://127.0.0.1:9/v1")]),
           "retries": {"max_attempts": 3, "initial_s": 0.0, "max_s": 0.05, "jitter_s": 0.0}}
    raw.update(sections)
    return raw


def endpoint(name: str, url: str, model: str = "oracle", **fields: Any) -> dict[str, Any]:
    return {"name": name, "base_url": url, "model": model, "timeout_s": 5, **fields}


def with_urls(raw: dict[str, Any], urls: dict[str, str]) -> DistillConfig:
    """`raw` with endpoints renamed to live URLs (by endpoint name), validated."""
    raw = copy.deepcopy(raw)
    for pool in ("teacher_pool", "reviewer_pool"):
        for e in raw.get(pool, []):
            e["base_url"] = urls.get(e["name"], e["base_url"])
    return parse_config(raw)


@contextlib.contextmanager
def live_oracle(raw: dict[str, Any], **oracle_fields: Any) -> Iterator[tuple[str, Oracle]]:
    """An oracle for the scenarios of `raw`, served on a free port: (its /v1 URL, the oracle)."""
    oracle = Oracle(scenario_stream(parse_config(raw).scenarios), **oracle_fields)
    with LiveServer(oracle_app(oracle)) as live:
        yield live.url, oracle
