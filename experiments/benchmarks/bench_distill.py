"""Distillation throughput: accepted records/s through the whole pipeline (teacher pool, live
environment, validators, reviewer, journal, JSONL + Parquet shards) against the oracle endpoint.

The oracle is a real `launch/distill.py --serve=oracle` process on 127.0.0.1, so the pipeline
sees an HTTP teacher and reviewer; `--latency_s` holds each answer back like a model's think
time. With latency the run is I/O-bound and should scale with concurrency; without it the
figure is what this process's CPU can push (the oracle's CPU shares the machine). Each setting
distils the config's scenarios (quotas scaled to the record count) into a fresh output, after
one untimed warm-up run. Appends one row per setting to BENCHMARKS.md with the machine's load.

    python experiments/benchmarks/bench_distill.py [--latency_s 0.1 --concurrency 1,8,32
        --records 160 --serial_records 24]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from seetjax.distill.load import parse_config
from seetjax.distill.pipeline import RunSummary, run_async

sys.path.insert(0, str(Path(__file__).parent))
from harness import Summary, free_port, load, record, start_service  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TITLE = "Distillation: records/s against the oracle endpoint (bench_distill.py)"
COLUMNS = ["date", "machine", "setting", "oracle latency", "concurrency", "records accepted",
           "records/s", "requests/s", "wall s", "load"]


def scaled(raw: dict[str, Any], records: int) -> dict[str, Any]:
    """`raw` with its scenario quotas scaled to sum to `records` (scenario i never changes, so
    a smaller quota is a prefix of the config's scenarios)."""
    specs = raw["scenarios"]
    total = sum(s["quota"] for s in specs)
    quotas = [records * s["quota"] // total for s in specs]
    quotas[0] += records - sum(quotas)
    return {**raw, "scenarios": [{**s, "quota": q} for s, q in zip(specs, quotas, strict=True)]}


def with_endpoint(raw: dict[str, Any], url: str) -> dict[str, Any]:
    """`raw` with every teacher and reviewer endpoint at `url`."""
    return {**raw, **{pool: [{**e, "base_url": url} for e in raw.get(pool, [])]
                      for pool in ("teacher_pool", "reviewer_pool")}}


def start_oracle(config_path: Path, latency_s: float) -> tuple[subprocess.Popen, str]:
    """The oracle for the config's scenarios in its own process: (process, /v1 URL)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    process = start_service(
        [sys.executable, "launch/distill.py", f"--config={config_path}", "--serve=oracle",
         f"--port={port}", f"--latency_s={latency_s}"], f"{url}/models", ROOT, timeout_s=120)
    return process, url


def distil(raw: dict[str, Any], url: str, records: int, concurrency: int, out: Path
           ) -> RunSummary:
    raw = with_endpoint(scaled(raw, records), url)
    raw["output"] = {**raw["output"], "url": str(out)}
    raw["concurrency"] = {"max_workers": concurrency}
    return asyncio.run(run_async(parse_config(raw)))


def requests(summary: RunSummary) -> int:
    return sum(counts.get("requests", 0) for pool in summary.usage.values()
               for counts in pool.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/distill/run.telecom.yaml")
    parser.add_argument("--latency_s", type=float, default=0.1, help="the oracle's think time")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated")
    parser.add_argument("--records", type=int, default=160, help="scenarios per setting")
    parser.add_argument("--serial_records", type=int, default=24,
                        help="scenarios at concurrency 1 with latency (each waits every reply)")
    parser.add_argument("--cpu_concurrency", type=int, default=32,
                        help="concurrency of the run without latency")
    parser.add_argument("--no_record", action="store_true", help="print only")
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    raw = yaml.safe_load((ROOT / args.config).read_text(encoding="utf-8"))
    settings = [(args.latency_s, int(c)) for c in args.concurrency.split(",")]
    settings.append((0.0, args.cpu_concurrency))
    work = Path(tempfile.mkdtemp(prefix="bench_distill_"))
    # The oracle reads the scenarios from a config; the largest quota covers every setting.
    oracle_config = work / "oracle.yaml"
    oracle_config.write_text(yaml.safe_dump(scaled(raw, args.records), allow_unicode=True))
    load_before = load()
    results: dict[tuple[float, int], tuple[int, RunSummary]] = {}
    for latency in dict.fromkeys(lat for lat, _ in settings):
        process, url = start_oracle(oracle_config, latency)
        try:
            distil(raw, url, 8, 8, work / f"warmup-{latency}")
            for lat, concurrency in settings:
                if lat != latency:
                    continue
                n = args.serial_records if concurrency == 1 and lat else args.records
                summary = distil(raw, url, n, concurrency, work / f"run-{lat}-{concurrency}")
                results[lat, concurrency] = (n, summary)
                print(f"latency {lat * 1000:.0f} ms, concurrency {concurrency:>2}: "
                      f"{summary.records_per_s:6.2f} records/s, "
                      f"{requests(summary) / summary.seconds:6.1f} requests/s, committed "
                      f"{summary.committed} of {n} scenarios in {summary.seconds:.1f} s",
                      flush=True)
        finally:
            process.terminate()
            process.wait(30)
    load_text = f"{load_before:.1f} -> {load():.1f}"
    setting = (f"{args.config} scenarios, oracle in its own process over HTTP, review on, "
               "JSONL + Parquet, fsync")
    print(f"load {load_text}; {setting}")
    rates = {f"{lat * 1000:.0f} ms x{c}": Summary(s.records_per_s, 0.0, 1)
             for (lat, c), (_, s) in results.items()}
    serial = results.get((args.latency_s, 1))
    widest = max((c for lat, c in results if lat == args.latency_s), default=1)
    ratio = (f"{results[args.latency_s, widest][1].records_per_s / serial[1].records_per_s:.1f}x "
             f"(x{widest} over x1)" if serial and serial[1].records_per_s else "-")
    record("distillation (records/s)", setting, rates, ratio)
    if args.no_record:
        return
    today = datetime.date.today().isoformat()
    for (lat, c), (n, s) in results.items():
        add_row(TITLE, COLUMNS, [
            today, cpu_machine(), setting, f"{lat * 1000:.0f} ms", str(c),
            f"{s.committed.get('accepted', 0)} of {n}", f"{s.records_per_s:.1f}",
            f"{requests(s) / s.seconds:.1f}", f"{s.seconds:.1f}", load_text])


if __name__ == "__main__":
    main()
