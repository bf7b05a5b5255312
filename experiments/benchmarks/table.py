"""Prints the figures of the benchmarks run since `--since` (default: all in the results file) as
one markdown table: each side's median rate with its spread, the ratio, and the load it ran at.

    python experiments/benchmarks/table.py [--results runs/bench/results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from harness import RESULTS  # noqa: E402


def table(rows: list[dict]) -> str:
    lines = ["| benchmark | setting | rates (median, spread) | ratio | load |",
             "|---|---|---|---|---|"]
    for row in rows:
        rates = "; ".join(f"{name} {r['rate']:,.0f} ({r['spread']:.0%})"
                          for name, r in row["results"].items())
        lines.append(f"| {row['benchmark']} | {row['setting']} | {rates} | {row['ratio']} | "
                     f"{row['load']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    print(table(rows))


if __name__ == "__main__":
    main()
