"""A training run's RL step time by how its rollouts run: in lock step vs through the serving
engine (`rollout.mode`), or synchronously vs ahead of the learner (`rollout.schedule`).

Short runs of a run config (default configs/tiny.py without its SFT warm-up, as
tests/integration/test_train.py's RL_ONLY cuts it), one per mode, in one process one after the
other, each in a fresh workdir: `--steps` RL steps each, no checkpoint before the last (a
checkpoint restarts an asynchronous pipeline). Prints and records each mode's median step time
(the wall time of the trainer's step: rollout or the wait for it, slow loop, batch, update,
metrics, the snapshot an asynchronous run publishes) over the steps after the second (the
first two compile) but the last (it checkpoints), the first step alone, and the rollout's policy
tokens per step.

Modes, a baseline and its variant: `lockstep,engine` (the default, one device); `sync,async`
(`rollout.schedule="async"`, max_staleness 1: the next step's rollout plays during the update on
the same device: one device only, see `seetjax.rl.async_rollouts.check_devices`); and
`sync-split,async-split`, the same with the first half of the devices sampling and the rest
learning (`rollout.sampler_devices`); `sync-engine,async-engine`, sync vs async with the rollouts
through the engine (one device). `--devices N` simulates N CPU devices (set before JAX
starts). Every run trains with `learner.loss.tis_cap=inf` (the decoupled objective async needs;
with one optimizer update per step it costs the synchronous run nothing) and an entropy bonus of
0.01, so that every step updates (the tiny setting's base rarely earns a reward, and a step
without one skips its update).

    python experiments/benchmarks/bench_run_modes.py [--steps 6] [--no-write]
    python experiments/benchmarks/bench_run_modes.py --modes sync,async --devices 1
    python experiments/benchmarks/bench_run_modes.py --modes sync-split,async-split --devices 8
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from harness import load  # noqa: E402
from report import add_row, cpu_machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TITLE = "RL step time: rollouts in lock step vs the engine (bench_run_modes.py)"
COLUMNS = ["date", "machine", "setting", "lock-step step s (first)", "engine step s (first)",
           "speed-up", "policy tokens per step lock step / engine"]
SCHEDULE_TITLE = ("RL step time: synchronous vs asynchronous rollouts (bench_run_modes.py "
                  "--modes sync,async, sync-split,async-split or sync-engine,async-engine)")
SCHEDULE_COLUMNS = ["date", "machine", "setting", "sync step s (first)", "async step s (first)",
                    "speed-up", "most staleness trained on", "policy tokens per step sync / async"]
ASYNC = {"schedule": "async", "max_staleness": 1}
MODES = {"lockstep": {}, "engine": {"mode": "engine"}, "sync": {}, "sync-split": {},
         "async": ASYNC, "async-split": ASYNC, "sync-engine": {"mode": "engine"},
         "async-engine": {"mode": "engine", **ASYNC}}
PAIRS = (("lockstep", "engine"), ("sync", "async"), ("sync-split", "async-split"),
         ("sync-engine", "async-engine"))


def run(config_path: Path, mode: str, steps: int, workdir: Path) -> tuple[list[dict], list[float]]:
    """The RL steps' metrics rows of a run of `steps` steps in `mode`, and each step's wall
    seconds."""
    import jax

    from seetjax.config.sections import load_config_file
    from seetjax.rl.trainer import TrainRun

    config = load_config_file(config_path)
    config.sft.enabled = False
    config.data.categories, config.data.tasks_per_category = "base", 2
    config.eval.splits, config.eval.per_category = "", 1
    config.train.steps, config.train.checkpoint_every = steps, steps
    config.limits.max_episode_tokens, config.limits.max_reply_tokens = 768, 16
    config.limits.max_turn_tokens = 32
    config.learner.loss.tis_cap = math.inf
    config.learner.loss.entropy_coef = 0.01  # an update every step: the base rarely earns a reward
    config.rollout.update(MODES[mode])
    if mode.endswith("-split"):
        config.rollout.sampler_devices = jax.device_count() // 2
    seconds: list[float] = []

    class Timed(TrainRun):
        def _rl_step(self, step):
            start = time.perf_counter()
            out = super()._rl_step(step)
            seconds.append(time.perf_counter() - start)
            return out

    Timed(config, workdir).run()
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "stage" in r], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.py"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--modes", default="lockstep,engine",
                        help=f"one of {[','.join(p) for p in PAIRS]}")
    parser.add_argument("--devices", type=int, default=0, help="simulated CPU devices (0: as is)")
    parser.add_argument("--no-write", action="store_true", help="do not add a BENCHMARKS.md row")
    args = parser.parse_args()
    if args.steps < 4:
        parser.error("--steps: at least 4 (two that compile, one timed, one that checkpoints)")
    modes = tuple(args.modes.split(","))
    if modes not in PAIRS:
        parser.error(f"--modes: one of {[','.join(p) for p in PAIRS]}")
    if args.devices:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform"
                                   f"_device_count={args.devices}").strip()
    started = load()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {m: run(Path(args.config), m, args.steps, Path(tmp) / m) for m in modes}
    later = {m: statistics.median(s[2:-1]) for m, (_, s) in runs.items()}
    first = {m: s[0] for m, (_, s) in runs.items()}
    tokens = {m: statistics.mean(r["rollout/policy_tokens"] for r in rows)
              for m, (rows, _) in runs.items()}
    for m, (_, seconds) in runs.items():
        print(f"{m}: steps {[round(s, 2) for s in seconds]} s; median of steps 3 to "
              f"{len(seconds) - 1} {later[m]:.2f} s; policy tokens/step {tokens[m]:.0f}")
    base, mode = modes
    ratio = f"{later[base] / later[mode]:.2f}x"
    print(f"speed-up ({base} step time over {mode}'s): {ratio}")
    setting = (f"{os.path.relpath(args.config, ROOT)} RL only (2 base tasks, replies <= 16, "
               f"episodes <= 768 tokens), embedded model, {args.steps} steps per mode, median of "
               f"steps 3-{args.steps - 1}, {args.devices or 'the'} CPU devices, load {started:.1f} "
               f"-> {load():.1f}")
    if args.no_write:
        return
    cells = [f"{later[m]:.2f} ({first[m]:.1f})" for m in modes]
    counts = f"{tokens[base]:.0f} / {tokens[mode]:.0f}"
    if base == "lockstep":
        add_row(TITLE, COLUMNS, [datetime.date.today().isoformat(), cpu_machine(), setting,
                                 *cells, ratio, counts])
        return
    staleness = max(r.get("rollout/staleness", 0) for r in runs[mode][0])
    add_row(SCHEDULE_TITLE, SCHEDULE_COLUMNS, [
        datetime.date.today().isoformat(), cpu_machine(), f"{mode}: {setting}", *cells, ratio,
        f"{staleness:.0f}", counts])

if __name__ == "__main__":
    main()
