"""What makes a side-by-side benchmark trustworthy here: both sides on the same pinned CPUs with
equal thread counts, warmed up, timed in alternating rounds (so load that comes and goes hits
both alike), and reported as a median with its spread and the machine's load.

    from harness import pin_threads          # before jax / torch are imported
    pin_threads(args.threads)
    ...
    times = alternate({"seetjax": ours, "pytorch": theirs}, rounds=7)
    summary(times["seetjax"], work=tokens)   # Summary(rate=..., spread=...)

`pin_threads` restricts the process to N CPUs: XLA sizes its CPU thread pool from the schedulable
CPUs, and torch is told N intra-op threads, so neither side gets more cores than the other.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(os.environ.get("SEETJAX_BENCH_RESULTS", "runs/bench/results.jsonl"))


def pin_threads(threads: int) -> list[int]:
    """Pins this process to its first `threads` schedulable CPUs (0: all) and sets torch's
    intra-op threads to match; call before jax creates its CPU client. Returns the CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if threads:
        if threads > len(cpus):
            raise ValueError(f"--threads={threads}: only {len(cpus)} CPUs are schedulable")
        cpus = cpus[:threads]
        os.sched_setaffinity(0, cpus)
    os.environ["OMP_NUM_THREADS"] = str(len(cpus))
    try:
        import torch
    except ImportError:
        return cpus
    torch.set_num_threads(len(cpus))
    torch.set_num_interop_threads(1)
    return cpus


def alternate(runs: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 1
              ) -> dict[str, list[float]]:
    """Wall seconds of each run per round, after `warmup` untimed calls of each; the order flips
    every round (A B, B A, ...) so neither side always runs right after the other."""
    names = list(runs)
    for name in names:
        for _ in range(warmup):
            runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return times


@dataclasses.dataclass(frozen=True)
class Summary:
    """rate: the median of the rounds' work per second; spread: (fastest - slowest) / median."""

    rate: float
    spread: float
    rounds: int

    def __str__(self) -> str:
        return f"{self.rate:,.0f} (spread {self.spread:.0%})"


def summary(seconds: Sequence[float], work: float | Sequence[float]) -> Summary:
    """The median per-round rate and its spread; `work` per round (one figure, or one per round
    when rounds differ, e.g. batches with different token counts)."""
    work = [work] * len(seconds) if isinstance(work, (int, float)) else list(work)
    rates = [w / s for w, s in zip(work, seconds, strict=True)]
    median = statistics.median(rates)
    return Summary(median, (max(rates) - min(rates)) / median, len(rates))


def load() -> float:
    """The 1-minute load average: a figure taken at a load above the thread count is noisy."""
    return os.getloadavg()[0]


def record(benchmark: str, setting: str, results: Mapping[str, Summary], ratio: str,
           path: Path = RESULTS) -> None:
    """Appends one benchmark's figures to the results file `make bench` prints as one table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"benchmark": benchmark, "setting": setting, "load": round(load(), 2),
           "results": {k: dataclasses.asdict(v) for k, v in results.items()}, "ratio": ratio,
           "time": time.strftime("%Y-%m-%d %H:%M")}
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(command: Sequence[str], probe_url: str, cwd: str | os.PathLike,
                  timeout_s: float = 600) -> subprocess.Popen:
    """Starts `command` (a server on 127.0.0.1) and waits until GET `probe_url` answers 200;
    raises if the process exits first or the deadline passes (then it is killed)."""
    import httpx2 as httpx  # test extra: only the HTTP benchmarks need it

    process = subprocess.Popen(list(command), cwd=cwd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{command[1]} exited ({process.returncode}) before serving")
        try:
            if httpx.get(probe_url, timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"{command[1]} did not answer {probe_url} within {timeout_s:.0f} s")
