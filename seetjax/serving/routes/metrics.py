"""GET /metrics: the engine's load and latency in Prometheus' text format (version 0.0.4; no
API key needed, as /health), written here without a client library."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from seetjax.serving.deps import Server, ServerDep

router = APIRouter(tags=["metrics"])


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(server: Server) -> str:
    """Every metric with its HELP and TYPE lines (`seetjax_` names; seconds, tokens)."""
    engine, stats = server.engine, server.engine.stats
    lines: list[str] = []

    def metric(name: str, kind: str, doc: str, samples: list[tuple[str, float]]) -> None:
        lines.extend([f"# HELP seetjax_{name} {doc}", f"# TYPE seetjax_{name} {kind}"])
        lines.extend(f"seetjax_{name}{labels} {value:g}" for labels, value in samples)

    model = f'{{model="{_label(server.config.model_name)}",version="{engine.weight_version}"}}'
    metric("model_info", "gauge", "The served model and its weight version.", [(model, 1)])
    metric("queue_depth", "gauge", "Requests waiting for rows.", [("", engine.queue_length)])
    metric("rows_busy", "gauge", "Cache rows decoding a choice.", [("", engine.active_rows)])
    metric("rows_max", "gauge", "Cache rows the engine may use.", [("", engine.max_batch)])
    metric("tokens_per_second", "gauge", "Completion tokens per second over the last "
           f"{engine.token_rate.window_s:g} s.", [("", engine.token_rate.rate())])
    for name, doc in [("requests", "Requests submitted."), ("finished", "Requests finished."),
                      ("cancelled", "Requests cancelled."),
                      ("rejected", "Requests refused on a full queue."),
                      ("prompt_tokens", "Prompt tokens admitted."),
                      ("cached_tokens", "Prompt tokens reused from the prefix cache."),
                      ("completion_tokens", "Completion tokens generated.")]:
        metric(f"{name}_total", "counter", doc, [("", getattr(stats, name))])
    ttft = engine.ttft
    buckets = [(f'{{le="{"+Inf" if b == float("inf") else f"{b:g}"}"}}', n)
               for b, n in ttft.cumulative()]
    lines.extend(["# HELP seetjax_time_to_first_token_seconds From a request's submission to "
                  "its first token.", "# TYPE seetjax_time_to_first_token_seconds histogram"])
    lines.extend(f"seetjax_time_to_first_token_seconds_bucket{le} {n}" for le, n in buckets)
    lines.append(f"seetjax_time_to_first_token_seconds_sum {ttft.sum:g}")
    lines.append(f"seetjax_time_to_first_token_seconds_count {ttft.count}")
    return "\n".join(lines) + "\n"


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(server: ServerDep) -> PlainTextResponse:
    return PlainTextResponse(exposition(server),
                             media_type="text/plain; version=0.0.4; charset=utf-8")
