"""Generation rate of BFCL-format tasks (`seetjax.envs.generated`) and adds it to BENCHMARKS.md.

    .venv/bin/python experiments/benchmarks/bench_generator.py [--per-category 100]
        [--per-class 100] [--no-write]

Two timings, train split, default difficulty: `--per-category` tasks of each of the four
categories over every API class the generator has (the default stream), and `--per-class` tasks
of each class alone, spread over the four categories. A task's time covers its initial state,
plan execution (every action run on copied API instances), rendering and bfcl_eval's doc
preparation. Afterwards (untimed) every task's ground truth is checked with our checker, so the
rates are of tasks that are all valid (an untimed warm-up first fills the caches of class docs
and schemas). The machine's load average (as `uptime` shows it) goes in
the rows: the rate is CPU-bound and drops with other jobs on the machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from report import add_row, cpu_machine  # noqa: E402

from seetjax.envs.bfcl.checker import check_entry  # noqa: E402
from seetjax.envs.bfcl.data import CATEGORIES, BfclTask  # noqa: E402
from seetjax.envs.generated import CLASSES, generate_tasks  # noqa: E402

TITLE = "Generated BFCL-format tasks: generation rate (bench_generator.py)"
COLUMNS = ["date", "machine", "tasks", *(f"{c} tasks/s" for c in CATEGORIES), "all tasks/s",
           "calls per task"]
CLASS_TITLE = "Generated BFCL-format tasks: generation rate per API class (bench_generator.py)"
CLASS_COLUMNS = ["date", "machine", "load (1/5/15 min)", "tasks per class",
                 *(f"{c} tasks/s" for c in CLASSES)]


def timed(n: int, **kwargs) -> tuple[list[BfclTask], float]:
    start = time.perf_counter()
    tasks = generate_tasks(n, **kwargs)
    return tasks, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-category", type=int, default=100)
    parser.add_argument("--per-class", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()

    # Untimed warm-up: the first task of a class loads and caches its docs and schemas.
    for class_name in CLASSES:
        for category in CATEGORIES:
            generate_tasks(1, seed=args.seed + 1, category=category, classes=(class_name,))

    rates, tasks, total_time = {}, [], 0.0
    for category in CATEGORIES:
        batch, elapsed = timed(args.per_category, seed=args.seed, category=category)
        rates[category], total_time = args.per_category / elapsed, total_time + elapsed
        tasks += batch
    class_rates, per_cell = {}, max(1, args.per_class // len(CATEGORIES))
    for class_name in CLASSES:
        elapsed = 0.0
        for category in CATEGORIES:
            batch, seconds = timed(per_cell, seed=args.seed, category=category,
                                   classes=(class_name,))
            tasks, elapsed = tasks + batch, elapsed + seconds
        class_rates[class_name] = per_cell * len(CATEGORIES) / elapsed
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())

    invalid = [t.id for t in tasks
               if not check_entry(t, [[list(c)] if c else [] for c in t.ground_truth]).valid]
    if invalid:
        raise SystemExit(f"ground truth of {len(invalid)} generated tasks fails: {invalid[:5]}")
    streamed = tasks[:args.per_category * len(CATEGORIES)]
    calls = sum(len(c) for t in streamed for c in t.ground_truth) / len(streamed)
    overall = len(streamed) / total_time
    print(", ".join(f"{c} {r:,.0f}" for c, r in rates.items())
          + f"; all {overall:,.0f} tasks/s ({len(streamed)} tasks over {len(CLASSES)} classes, "
            f"{calls:.1f} calls per task); per class alone: "
          + ", ".join(f"{c} {r:,.0f}" for c, r in class_rates.items())
          + f" tasks/s; load {load}; all {len(tasks)} ground truths valid")
    if not args.no_write:
        today, machine = datetime.date.today().isoformat(), cpu_machine()
        add_row(TITLE, COLUMNS, [today, f"{machine}, load {load}, {len(CLASSES)} classes",
                                 str(len(streamed)), *(f"{rates[c]:,.0f}" for c in CATEGORIES),
                                 f"{overall:,.0f}", f"{calls:.1f}"])
        add_row(CLASS_TITLE, CLASS_COLUMNS, [today, machine, load,
                                             str(per_cell * len(CATEGORIES)),
                                             *(f"{class_rates[c]:,.0f}" for c in CLASSES)])


if __name__ == "__main__":
    main()
