"""Generation rate of BFCL-format tasks (`seetjax.envs.generated`) and adds it to BENCHMARKS.md.

    .venv/bin/python experiments/benchmarks/bench_generator.py [--per-category 100] [--no-write]

Generates `--per-category` tasks of each of the four categories (train split, default
difficulty), timed; a task's time covers its initial state, plan execution (every action run on
copied API instances), rendering and bfcl_eval's doc preparation. Afterwards (untimed) every
task's ground truth is checked with our checker, so the rate is of tasks that are all valid.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from report import add_row, cpu_machine  # noqa: E402

from seetjax.envs.bfcl_data import CATEGORIES  # noqa: E402
from seetjax.envs.generated import generate_tasks  # noqa: E402
from seetjax.eval.bfcl_checker import check_entry  # noqa: E402

TITLE = "Generated BFCL-format tasks: generation rate (bench_generator.py)"
COLUMNS = ["date", "machine", "tasks", *(f"{c} tasks/s" for c in CATEGORIES), "all tasks/s",
           "calls per task"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-category", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()

    rates, tasks, total_time = {}, [], 0.0
    for category in CATEGORIES:
        start = time.perf_counter()
        batch = generate_tasks(args.per_category, seed=args.seed, category=category)
        elapsed = time.perf_counter() - start
        rates[category], total_time = args.per_category / elapsed, total_time + elapsed
        tasks += batch
    invalid = [t.id for t in tasks
               if not check_entry(t, [[list(c)] if c else [] for c in t.ground_truth]).valid]
    if invalid:
        raise SystemExit(f"ground truth of {len(invalid)} generated tasks fails: {invalid[:5]}")
    calls = sum(len(c) for t in tasks for c in t.ground_truth) / len(tasks)
    overall = len(tasks) / total_time
    print(", ".join(f"{c} {r:,.0f}" for c, r in rates.items())
          + f"; all {overall:,.0f} tasks/s ({len(tasks)} tasks, {calls:.1f} calls per task, "
            "all ground truth valid)")
    if not args.no_write:
        add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), cpu_machine(), str(len(tasks)),
                                 *(f"{rates[c]:,.0f}" for c in CATEGORIES), f"{overall:,.0f}",
                                 f"{calls:.1f}"])


if __name__ == "__main__":
    main()
