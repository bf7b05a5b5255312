"""A training run's RL step time with rollouts in lock step vs through the serving engine.

Two short runs of a run config (default configs/tiny.py without its SFT warm-up, as
tests/integration/test_train.py's RL_ONLY cuts it), one per `rollout.mode`, in one process one
after the other, each in a fresh workdir: `--steps` RL steps each. Prints and records each mode's
median step time (rollout + batch + learner update, from metrics.jsonl's `time/*`) over the steps
after the first (which compiles), the first step alone, and the rollout's policy tokens.

    python experiments/benchmarks/bench_run_modes.py [--steps 3] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from harness import load  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TITLE = "RL step time: rollouts in lock step vs the engine (bench_run_modes.py)"
COLUMNS = ["date", "machine", "setting", "lock-step step s (first)", "engine step s (first)",
           "speed-up", "policy tokens per step lock step / engine"]


def run(config_path: Path, mode: str, steps: int, workdir: Path) -> list[dict]:
    """The RL steps' metrics rows of a run of `steps` steps with `rollout.mode=mode`."""
    from seetjax.config.sections import load_config_file
    from seetjax.rl.trainer import TrainRun

    config = load_config_file(config_path)
    config.sft.enabled = False
    config.data.categories, config.data.tasks_per_category = "base", 2
    config.eval.splits, config.eval.per_category = "", 1
    config.train.steps, config.train.checkpoint_every = steps, steps
    config.limits.max_episode_tokens, config.limits.max_reply_tokens = 768, 16
    config.limits.max_turn_tokens = 32
    config.rollout.mode = mode
    TrainRun(config, workdir).run()
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "stage" in r]


def step_seconds(row: dict) -> float:
    return row["time/rollout_s"] + row["time/batch_s"] + row["time/learn_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.py"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="do not add a BENCHMARKS.md row")
    args = parser.parse_args()
    modes = ("lockstep", "engine")
    started = load()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {m: run(Path(args.config), m, args.steps, Path(tmp) / m) for m in modes}
    later = {m: statistics.median(step_seconds(r) for r in rows[m][1:]) for m in modes}
    first = {m: step_seconds(rows[m][0]) for m in modes}
    tokens = {m: statistics.mean(r["rollout/policy_tokens"] for r in rows[m]) for m in modes}
    ratio = f"{later['lockstep'] / later['engine']:.2f}x"
    for m in modes:
        print(f"{m}: steps {[round(step_seconds(r), 2) for r in rows[m]]} s; median after the "
              f"first {later[m]:.2f} s; policy tokens/step {tokens[m]:.0f}")
    print(f"speed-up (lock step / engine step time): {ratio}")
    setting = (f"{os.path.relpath(args.config, ROOT)} RL only (2 base tasks, replies <= 16, "
               f"episodes <= 768 tokens), embedded model, {args.steps} steps per mode, median of "
               f"steps 2-{args.steps}, load {started:.1f} -> {load():.1f}")
    if not args.no_write:
        add_row(TITLE, COLUMNS, [
            datetime.date.today().isoformat(), cpu_machine(), setting,
            f"{later['lockstep']:.2f} ({first['lockstep']:.1f})",
            f"{later['engine']:.2f} ({first['engine']:.1f})", ratio,
            f"{tokens['lockstep']:.0f} / {tokens['engine']:.0f}"])


if __name__ == "__main__":
    main()
