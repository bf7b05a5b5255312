"""Replays all 800 BFCL multi-turn ground-truth entries through our executor + checker and
through bfcl_eval's own executor + checker, in one run, and appends the figures to BENCHMARKS.md.

    .venv/bin/python experiments/benchmarks/bench_env.py [--repeats 5] [--no-write]

Each side executes every ground-truth call twice per entry (once as the "model", once on the
shadow ground-truth instances) and runs the state and response checks of every turn. A third row
plays the same trajectories as full episodes through `BfclEnv` (prompt rendering, parsing, live
per-turn checks). Times are the best of `--repeats` passes; calls/s counts executed calls.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # for tests.eval.bfcl_reference, the wrapper of bfcl_eval's checker

from seetjax.envs.bfcl import BfclEnv  # noqa: E402
from seetjax.envs.bfcl_data import CATEGORIES, load_category, load_tasks  # noqa: E402
from seetjax.eval.bfcl_checker import check_entry  # noqa: E402
from tests.eval.bfcl_reference import bfcl_check_strings  # noqa: E402


def _best(fn, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()

    tasks = [t for c in CATEGORIES for t in load_tasks(c)]
    raws = [e for c in CATEGORIES for e in load_category(c)]
    ours_trajectories = [[[list(calls)] if calls else [] for calls in t.ground_truth] for t in tasks]
    bfcl_trajectories = [[[list(calls)] if calls else [] for calls in e["ground_truth"]] for e in raws]
    calls = 2 * sum(len(c) for t in tasks for c in t.ground_truth)

    def ours() -> None:
        results = [check_entry(t, traj) for t, traj in zip(tasks, ours_trajectories)]
        assert all(r.valid for r in results)

    def reference() -> None:
        results = [bfcl_check_strings(e, traj) for e, traj in zip(raws, bfcl_trajectories)]
        assert all(r["valid"] for r in results)

    env = BfclEnv()
    messages = [[("[" + ", ".join(c.to_python() for c in turn) + "]") if turn else None
                 for turn in t.ground_truth] for t in tasks]

    def episodes() -> None:
        for task, turns in zip(tasks, messages):
            env.reset(task)
            for message in turns:
                if message is not None:
                    env.step(message)
                env.step("Done.")

    ours_best, ours_median = _best(ours, args.repeats)
    bfcl_best, bfcl_median = _best(reference, args.repeats)
    env_best, env_median = _best(episodes, args.repeats)

    rows = [
        ("seetjax executor + checker (`check_entry`)", ours_best, ours_median, calls),
        ("bfcl_eval executor + `multi_turn_checker`", bfcl_best, bfcl_median, calls),
        ("seetjax `BfclEnv` episodes (scripted ground truth)", env_best, env_median, calls),
    ]
    machine = (f"{os.cpu_count()}-core CPU ({platform.machine()}, {_cpu_model()}), "
               f"Python {platform.python_version()}, bfcl-eval {metadata.version('bfcl-eval')}")
    lines = [
        f"\n## BFCL environment: replay of all 800 ground-truth entries "
        f"({datetime.date.today().isoformat()})\n",
        f"Machine: {machine}; shared with other jobs, so compare ratios within one run. "
        f"Best and median of {args.repeats} passes; `experiments/benchmarks/bench_env.py`.\n",
        "| path | best (s) | median (s) | calls/s (best) |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {best:.3f} | {median:.3f} | {n / best:,.0f} |" for name, best, median, n in rows],
        "",
        f"bfcl_eval / seetjax wall-time ratio (best): **{bfcl_best / ours_best:.2f}x** "
        f"({calls} calls per pass: each ground-truth call runs as the model's and as the "
        "shadow ground truth's).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        path = REPO / "BENCHMARKS.md"
        if not path.exists():
            path.write_text("# Benchmarks\n\nMeasured figures, newest last. Each section names its "
                            "machine and the script that produced it.\n", encoding="utf-8")
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
