"""Replays all 800 BFCL multi-turn ground-truth entries through our executor + checker and
through bfcl_eval's own executor + checker, in one run, and adds the figures to BENCHMARKS.md.

    .venv/bin/python experiments/benchmarks/bench_env.py [--repeats 5] [--no-write]

Each side executes every ground-truth call twice per entry (once as the "model", once on the
shadow ground-truth instances) and runs the state and response checks of every turn. A third row
plays the same trajectories as full episodes through `BfclEnv` (prompt rendering, parsing, live
per-turn checks). Times are the best of `--repeats` passes; calls/s counts executed calls.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # for tests.envs.bfcl.bfcl_reference, the wrapper of bfcl_eval's checker
sys.path.insert(0, str(Path(__file__).parent))

from report import add_row, cpu_machine  # noqa: E402

from seetjax.envs.bfcl.checker import check_entry  # noqa: E402
from seetjax.envs.bfcl.data import CATEGORIES, load_category, load_tasks  # noqa: E402
from seetjax.envs.bfcl.env import BfclEnv  # noqa: E402
from tests.envs.bfcl.bfcl_reference import bfcl_check_strings  # noqa: E402

TITLE = "BFCL environment: replay of all 800 ground-truth entries (bench_env.py)"
COLUMNS = ["date", "machine", "seetjax executor + checker, s", "bfcl_eval executor + checker, s",
           "seetjax BfclEnv episodes, s", "seetjax calls/s", "speed-up"]


def _best(fn, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


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

    # Best of the passes; each ground-truth call runs as the model's and on the shadow instances.
    print(f"seetjax {ours_best:.3f}s (median {ours_median:.3f}), bfcl_eval {bfcl_best:.3f}s "
          f"(median {bfcl_median:.3f}), BfclEnv episodes {env_best:.3f}s (median {env_median:.3f}); "
          f"{calls} calls per pass, {calls / ours_best:,.0f} calls/s; "
          f"speed-up {bfcl_best / ours_best:.2f}x")
    if not args.no_write:
        add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), cpu_machine(),
                                 f"{ours_best:.3f}", f"{bfcl_best:.3f}", f"{env_best:.3f}",
                                 f"{calls / ours_best:,.0f}", f"{bfcl_best / ours_best:.2f}x"])

if __name__ == "__main__":
    main()
