"""The OpenAI-compatible server under loopback load: continuous batching vs the same engine with
static batches vs one request at a time, side by side in one run; and continuous batching with
every other request a forced tool call (constrained decoding: its cost on the batch).

Each mode is a real `launch/serve.py` process on 127.0.0.1; this process is the load: N
concurrent clients (the official `openai` async client), each sending R streamed requests of mixed
prompt and reply lengths one after the other (replies decode to their max_tokens: `ignore_eos`, so
every mode does the same work). Per mode: completion tokens/s over the wall time, request latency
and time to first token (p50, p99), errors (must be 0). Appends one row per mode to BENCHMARKS.md
with the machine's load.

    python experiments/benchmarks/bench_server.py [--clients 16 --requests 32 --max_batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import openai

sys.path.insert(0, os.path.dirname(__file__))
from harness import free_port, start_service  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TITLE = "Server: continuous vs static batches vs one at a time (bench_server.py)"
COLUMNS = ["date", "machine", "setting", "mode", "completion tok/s", "requests/s",
           "latency p50 / p99 s", "TTFT p50 / p99 s", "errors", "load"]
WORDS = ("list move copy file folder ticket message send read the a of to with into from report "
         "docs math add divide number user contact search open close status please then").split()
MODES = {"continuous": ["--batching=continuous"], "static": ["--batching=static"],
         "one at a time": ["--max_batch=1"],
         # Every other request forces a tool call: constrained decoding's cost on the batch.
         "continuous half forced": ["--batching=continuous"]}
FORCED_EVERY = {"continuous half forced": 2}
TOOLS = [{"type": "function", "function": {"name": "move_file", "parameters": {
    "type": "object", "properties": {"source": {"type": "string"},
                                     "destination": {"type": "string"}},
    "required": ["source", "destination"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]


def start_server(extra: list[str], args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    process = start_service(
        [sys.executable, "launch/serve.py", f"--model={args.model}", f"--port={port}",
         f"--max_batch={args.max_batch}", f"--chunk_steps={args.chunk_steps}",
         "--max_queue=256", "--log_level=warning", "--served_model_name=bench", *extra],
        f"{root}/health", ROOT)
    return process, f"{root}/v1"


def workload(clients: int, requests: int, seed: int) -> list[list[tuple[str, int]]]:
    """Per client, its (prompt, max_tokens) in order: prompts of 5-300 words, replies of
    16-128 tokens; the same for every mode."""
    rng = random.Random(seed)
    return [[(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 300))),
              rng.choice([16, 32, 64, 128])) for _ in range(requests)] for _ in range(clients)]


async def one_request(client: openai.AsyncOpenAI, prompt: str, max_tokens: int, seed: int,
                      forced: bool = False) -> tuple[float, float, int]:
    """(latency s, time to first token s, completion tokens) of one streamed request; `forced`:
    with tools and tool_choice "required" (constrained decoding)."""
    start = time.perf_counter()
    first = None
    tokens = 0
    tools = {"tools": TOOLS, "tool_choice": "required"} if forced else {}
    stream = await client.chat.completions.create(
        model="bench", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
        temperature=1.0, seed=seed, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True}, **tools)
    async for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if first is None and delta is not None and (delta.content or delta.tool_calls):
            first = time.perf_counter() - start
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    latency = time.perf_counter() - start
    return latency, first if first is not None else latency, tokens


async def run_load(url: str, plan: list[list[tuple[str, int]]], forced_every: int = 0) -> dict:
    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0, timeout=3600)
    results, errors = [], []

    async def user(k: int, requests: list[tuple[str, int]]) -> None:
        for i, (prompt, max_tokens) in enumerate(requests):
            forced = bool(forced_every) and (k + i) % forced_every == 0
            try:
                results.append(await one_request(client, prompt, max_tokens, k * 1000 + i,
                                                  forced))
            except Exception as e:  # noqa: BLE001 - counted, reported
                errors.append(f"{type(e).__name__}: {e}")

    start = time.perf_counter()
    await asyncio.gather(*(user(k, r) for k, r in enumerate(plan)))
    wall = time.perf_counter() - start
    await client.close()
    latency = np.asarray([r[0] for r in results])
    ttft = np.asarray([r[1] for r in results])
    tokens = sum(r[2] for r in results)
    return {"wall": wall, "tokens": tokens, "requests": len(results), "errors": errors,
            "tok_s": tokens / wall, "req_s": len(results) / wall,
            "latency": (np.percentile(latency, 50), np.percentile(latency, 99)),
            "ttft": (np.percentile(ttft, 50), np.percentile(ttft, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="HF directory ('' = the embedded default)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=32, help="requests per client")
    parser.add_argument("--max_batch", type=int, default=8)
    parser.add_argument("--chunk_steps", type=int, default=16)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset")
    parser.add_argument("--no_record", action="store_true", help="print only")
    args = parser.parse_args()
    modes = args.modes.split(",")
    plan = workload(args.clients, args.requests, seed=0)
    warmup = workload(args.clients, 2, seed=1)  # compiles the shapes before the clock runs
    rows = {}
    load_before = os.getloadavg()[0]
    for mode in modes:
        process, url = start_server(MODES[mode], args)
        try:
            asyncio.run(run_load(url, warmup, FORCED_EVERY.get(mode, 0)))
            rows[mode] = asyncio.run(run_load(url, plan, FORCED_EVERY.get(mode, 0)))
        finally:
            process.terminate()
            process.wait(60)
        r = rows[mode]
        print(f"{mode:>23}: {r['tok_s']:7.1f} completion tok/s, {r['req_s']:5.2f} req/s, latency "
              f"p50 {r['latency'][0]:.2f} s p99 {r['latency'][1]:.2f} s, TTFT p50 "
              f"{r['ttft'][0]:.2f} s p99 {r['ttft'][1]:.2f} s, {r['requests']} requests, "
              f"{len(r['errors'])} errors in {r['wall']:.1f} s", flush=True)
        for error in r["errors"][:3]:
            print("   ", error)
    load = f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    setting = (f"{'embedded tiny Qwen2' if not args.model else Path(args.model).name} f32, "
               f"{args.clients} clients x {args.requests} streamed "
               f"requests, prompts 5-300 words, replies 16-128 tokens (ignore_eos), "
               f"max_batch {args.max_batch}, chunk {args.chunk_steps}")
    print(f"load {load}; {setting}")
    if args.no_record:
        return
    for mode, r in rows.items():
        add_row(TITLE, COLUMNS, [
            datetime.date.today().isoformat(), cpu_machine(), setting, mode,
            f"{r['tok_s']:,.0f}", f"{r['req_s']:.2f}",
            f"{r['latency'][0]:.2f} / {r['latency'][1]:.2f}",
            f"{r['ttft'][0]:.2f} / {r['ttft'][1]:.2f}", str(len(r["errors"])), load])


if __name__ == "__main__":
    main()
