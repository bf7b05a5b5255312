"""REINFORCE (without and with a baseline), RLOO, GRPO and PPO side by side on the QA search
environment (configs/qa_search.py), several seeds each, and a sweep of the search cost lambda.

Every run starts its RL phase from one SFT warm-up on the oracle's trajectories (shared by every
cell, so cells differ only in their RL phase: algorithm, seed, lambda) and is evaluated greedily on
held-out questions (test entities) at the start and at the end of that phase.

    python experiments/qa_algorithms/ablate_qa.py --seeds=0,1,2 \\
        --out=experiments/qa_algorithms/results/ablate_qa
    python experiments/qa_algorithms/ablate_qa.py --list                    # the grid's cells
    python experiments/qa_algorithms/ablate_qa.py --only=grpo_l0.1_s0,rloo_l0.1_s1  # some cells
    python experiments/qa_algorithms/ablate_qa.py --algorithms=rloo --sweep_algorithms=  # smaller
    python experiments/qa_algorithms/ablate_qa.py --config=my_qa.py --out=...  # another setting

Writes <out>/ablate_qa.csv (one row per run), ablate_qa.md (the tables), curves.png (per
algorithm, mean over seeds per RL step, then over the last 10 steps: rollout reward, answer F1,
searches per question and the learner's `grad_variance`) and, with a sweep, lambda.png (searches
per question against lambda).
Rerunning after an interruption skips finished cells and resumes an unfinished one from its last
checkpoint (every `train.checkpoint_every` steps); with --only nothing is summarised (run once
more without it when every cell is done). A finished cell's `ablation_result.json` holds its
figures and its curves and is kept in git (the cell's checkpoints and models are not), so a grid
finished over several sessions is summarised on any machine without training the warm-up again.

`grad_variance` (seetjax.learner.step.gradient_variance): the trace of the covariance of the
micro-batches' estimates of the update's gradient, M g_k against g = sum_k g_k over the M
micro-batches of the step's rows; `grad_variance_rel` divides it by ||g||^2 (scale-free, as the
algorithms' advantages differ in scale).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import shutil
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
from grid import cached_run, finished, mean_std, set_field, trailing_mean, warm_up, write_csv  # noqa: E402

from seetjax.config.sections import load_config_file  # noqa: E402
from seetjax.report.plots import read_metrics  # noqa: E402
from seetjax.rl.trainer import TrainRun  # noqa: E402
from seetjax.runtime.cache import enable_compilation_cache  # noqa: E402

ALGORITHMS: dict[str, dict[str, object]] = {
    "reinforce": {"learner.algorithm": "reinforce", "learner.advantage": {"baseline": "none"}},
    "reinforce_baseline": {"learner.algorithm": "reinforce"},  # the batch's mean return
    "rloo": {"learner.algorithm": "rloo"},
    "grpo": {"learner.algorithm": "grpo"},
    "ppo": {"learner.algorithm": "ppo"},
}
DEFAULT_CONFIG = ROOT / "configs" / "qa_search.py"
LAMBDA = 0.1  # the search cost of the algorithm comparison
LAMBDAS = (0.0, 0.1, 0.3)
SWEPT = ("rloo",)  # the algorithms of the lambda sweep (--sweep_algorithms)
SMOOTHING = 10  # curves.png: each step's value is the mean over it and the 9 before it
CURVES = (("rollout/reward", "rollout reward"), ("rollout/env_f1", "rollout answer F1"),
          ("rollout/env_searches", "searches per question (rollouts)"),
          ("learner/grad_variance", "gradient-estimate variance"))


def cells(seeds: list[int], sweep_seeds: list[int], swept: tuple[str, ...] = SWEPT,
          compared: tuple[str, ...] = tuple(ALGORITHMS)) -> list[tuple[str, float, int]]:
    """(algorithm, lambda, seed) of every run: the comparison of the `compared` algorithms,
    then the sweep's other lambdas."""
    out = [(a, LAMBDA, s) for a in compared for s in seeds]
    return out + [(a, lam, s) for a in swept for lam in LAMBDAS if lam != LAMBDA
                  for s in sweep_seeds]


def cell_name(algorithm: str, lam: float, seed: int) -> str:
    return f"{algorithm}_l{lam:g}_s{seed}"


def base_config(args) -> object:
    """The --config file (configs/qa_search.py) with the flags given (None: the config's
    value)."""
    config = load_config_file(args.config)
    for dotted, value in (("train.steps", args.steps), ("data.tasks_per_category", args.questions),
                          ("data.tasks_per_step", args.tasks_per_step),
                          ("eval.per_category", args.eval_questions)):
        if value is not None:
            set_field(config, dotted, value)
    return config


def cell_config(algorithm: str, lam: float, seed: int, warm: Path, args) -> object:
    """The run config of one cell: its RL phase from the warm-up model `warm`."""
    config = base_config(args)
    config.seed = seed
    config.model.path = str(warm)
    config.sft.enabled = False
    config.env.search_cost = lam
    for dotted, value in ALGORITHMS[algorithm].items():
        set_field(config, dotted, value)
    return config


def run_cell(algorithm: str, lam: float, seed: int, warm: Path, args) -> dict:
    """One RL phase from the warm-up model; its start and end figures on held-out questions."""
    config = cell_config(algorithm, lam, seed, warm, args)
    workdir = args.out / cell_name(algorithm, lam, seed)
    share_start(workdir, lam, seed, args)
    evals = TrainRun(config, workdir).run()["evals"]
    start, end = (evals[m]["splits"]["test"] for m in ("after_sft", "after_rl"))
    rows = [r for r in read_metrics(workdir / "metrics.jsonl") if "learner/grad_variance" in r]
    variance = [r["learner/grad_variance"] for r in rows]
    relative = [r["learner/grad_variance"] / max(r["learner/grad_norm"] ** 2, 1e-30) for r in rows]
    return {"algorithm": algorithm, "lambda": lam, "seed": seed,
            **{f"start_{k}": start[k] for k in ("reward", "exact_match", "f1", "searches")},
            **{f"end_{k}": end[k] for k in ("reward", "exact_match", "f1", "searches")},
            "reward_gain": end["reward"] - start["reward"],
            "grad_variance": float(np.mean(variance)) if variance else float("nan"),
            "grad_variance_rel": float(np.mean(relative)) if relative else float("nan"),
            "updates": len(rows), "curves": step_curves(workdir)}


def share_start(workdir: Path, lam: float, seed: int, args) -> None:
    """The greedy start-of-RL evaluation depends on the model and lambda only: a cell reuses one
    another cell of the same lambda has written (TrainRun reads a milestone it finds)."""
    mine = workdir / "evals" / "untrained.json"
    for other in args.out.glob(f"*_l{lam:g}_s*/evals/untrained.json"):
        if not mine.exists() and other != mine:
            mine.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(other, mine)


def run(args) -> list[dict]:
    grid = cells(args.seeds, args.sweep_seeds, args.sweep_algorithms, args.algorithms)
    if args.only:
        grid = [c for c in grid if cell_name(*c) in args.only]
    # Finished cells' results are kept in git (not their models): a grid finished over several
    # sessions, or on other machines, is summarised without training its warm-up.
    unfinished = any(finished(args.out / cell_name(*c)) is None for c in grid)
    warm = warm_up(base_config(args).sft.run, args.out / "sft") if unfinished else None
    return [cached_run(args.out / cell_name(*c), functools.partial(run_cell, *c, warm, args))
            for c in grid]


def step_curves(workdir: Path) -> dict[str, list[float | None]]:
    """Each of CURVES' metrics per RL step of the run in `workdir` (None: the step has none)."""
    rows = {r["step"]: r for r in read_metrics(workdir / "metrics.jsonl")
            if "rollout/reward" in r}
    return {key: [rows.get(s, {}).get(key) for s in range(1, max(rows, default=0) + 1)]
            for key, _ in CURVES}


def curves(results: list[dict], key: str) -> np.ndarray:
    """[steps] the mean over runs' results of `key` per RL step (nan where no run has it)."""
    per_run = [[np.nan if v is None else v for v in r["curves"][key]] for r in results]
    width = max(map(len, per_run), default=0)
    padded = np.array([p + [np.nan] * (width - len(p)) for p in per_run], float).reshape(-1, width)
    counts = np.isfinite(padded).sum(axis=0)
    return np.where(counts > 0, np.nansum(padded, axis=0) / np.maximum(counts, 1), np.nan)


def summarise(results: list[dict], args) -> str:
    keys = ("start_reward", "end_reward", "reward_gain", "end_exact_match", "end_f1",
            "start_searches", "end_searches", "grad_variance", "grad_variance_rel")
    config = base_config(args)
    steps, questions = config.train.steps, config.data.tasks_per_category
    per_step, held_out = config.data.tasks_per_step, config.eval.per_category
    own = "" if args.config == DEFAULT_CONFIG else f"--config={args.config} "
    lines = [f"Command: `python experiments/qa_algorithms/ablate_qa.py {own}"
             f"--seeds={','.join(map(str, args.seeds))} "
             f"--steps={steps} --questions={questions} --tasks_per_step={per_step} "
             f"--eval_questions={held_out} --algorithms={','.join(args.algorithms)} "
             f"--sweep_seeds={','.join(map(str, args.sweep_seeds))} "
             f"--sweep_algorithms={','.join(args.sweep_algorithms)}`, "
             f"{datetime.date.today().isoformat()}, {os.cpu_count()}-core CPU. One SFT warm-up "
             f"({config.sft.run.train.steps} steps on {config.sft.run.data.tasks_per_category} "
             f"oracle dialogs) shared by every run, then each run's RL phase of {steps} steps "
             f"({per_step} questions x {config.rollout.group_size} samples each, from "
             f"{questions} training questions); greedy evaluation on {held_out} held-out "
             f"questions at its start and end; mean +- std over {len(args.seeds)} seeds.", "",
             f"Algorithms at lambda = {LAMBDA:g}:", "",
             "| algorithm | " + " | ".join(k.replace("_", " ") for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for a in args.algorithms:
        mine = [r for r in results if r["algorithm"] == a and r["lambda"] == LAMBDA]
        lines.append(f"| {a} | " + " | ".join(
            mean_std([r[k] for r in mine], ".3g" if "variance" in k else ".3f") for k in keys)
            + " |")
    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.4))
    for a in args.algorithms:
        mine = [r for r in results if r["algorithm"] == a and r["lambda"] == LAMBDA]
        for ax, (key, title) in zip(axes, CURVES):
            c = trailing_mean(curves(mine, key), SMOOTHING)
            ax.plot(np.arange(1, len(c) + 1), c, label=a)
            ax.set_title(f"{title}, mean of {SMOOTHING} steps")
            ax.set_xlabel("RL step")
    axes[-1].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "curves.png", dpi=110)
    if not args.sweep_algorithms:
        return "\n".join(lines) + "\n"
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    for k, swept in enumerate(args.sweep_algorithms):
        lines += ["", f"Search cost sweep ({swept}, seeds "
                  f"{','.join(map(str, args.sweep_seeds))}):", "",
                  "| lambda | held-out searches, start | held-out searches, end | end reward | "
                  "rollout searches, last 3 steps |", "|---|---|---|---|---|"]
        means, stds = [], []
        for lam in LAMBDAS:
            mine = [r for r in results if r["algorithm"] == swept and r["lambda"] == lam
                    and r["seed"] in args.sweep_seeds]
            recent = curves(mine, "rollout/env_searches")[-3:]
            lines.append(f"| {lam:g} | {mean_std([r['start_searches'] for r in mine])} | "
                         f"{mean_std([r['end_searches'] for r in mine])} | "
                         f"{mean_std([r['end_reward'] for r in mine])} | "
                         f"{np.nanmean(recent) if recent.size else float('nan'):.3f} |")
            ends = [r["end_searches"] for r in mine]
            means.append(np.mean(ends))
            stds.append(np.std(ends))
        ax.errorbar(np.array(LAMBDAS) + 0.01 * k, means, yerr=stds, fmt="o-", capsize=4,
                    label=swept)
    ax.legend(fontsize=8)
    ax.set_xlabel("search cost lambda")
    ax.set_ylabel("held-out searches per question, end")
    fig.tight_layout()
    fig.savefig(args.out / "lambda.png", dpi=110)
    return "\n".join(lines) + "\n"


def algorithm_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of ALGORITHMS' names ('' is none)."""
    names = tuple(n for n in text.split(",") if n)
    if set(names) - set(ALGORITHMS):
        raise argparse.ArgumentTypeError(f"unknown {sorted(set(names) - set(ALGORITHMS))}; "
                                         f"one of {', '.join(ALGORITHMS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "experiments/qa_algorithms/results/ablate_qa")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="the QA run config every cell starts from (its warm-up included)")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")],
                        default=[0, 1, 2])
    parser.add_argument("--algorithms", type=algorithm_list, default=tuple(ALGORITHMS),
                        help="comma-separated algorithms compared at lambda 0.1 (default: all)")
    parser.add_argument("--sweep_algorithms", type=algorithm_list, default=SWEPT,
                        help="comma-separated algorithms of the lambda sweep ('': none)")
    parser.add_argument("--sweep_seeds", type=lambda s: [int(x) for x in s.split(",")],
                        default=None, help="seeds of the lambda sweep (default: --seeds)")
    parser.add_argument("--steps", type=int, default=None,
                        help="RL steps per run (default: the config's, 200)")
    parser.add_argument("--questions", type=int, default=None,
                        help="training questions (default: the config's, 1,024)")
    parser.add_argument("--tasks_per_step", type=int, default=None,
                        help="questions per RL step (default: the config's, 8)")
    parser.add_argument("--eval_questions", type=int, default=None,
                        help="held-out questions (default: the config's, 64)")
    parser.add_argument("--only", type=lambda s: set(s.split(",")), default=None,
                        help="comma-separated cells (see --list); nothing is summarised")
    parser.add_argument("--list", action="store_true", help="print the cells and exit")
    args = parser.parse_args()
    args.sweep_seeds = args.sweep_seeds or args.seeds
    names = [cell_name(*c) for c in cells(args.seeds, args.sweep_seeds, args.sweep_algorithms,
                                          args.algorithms)]
    if args.list:
        print("\n".join(names))
        return
    if args.only and args.only - set(names):
        sys.exit(f"unknown cells {sorted(args.only - set(names))}; see --list")
    enable_compilation_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(args)
    if args.only:
        return
    print(write_summary(results, args))


def write_summary(results: list[dict], args) -> str:
    """<out>/ablate_qa.csv (a row per run; the curves stay in each cell's ablation_result.json),
    ablate_qa.md and the figures; returns the tables."""
    write_csv([{k: v for k, v in r.items() if k != "curves"} for r in results],
              args.out / "ablate_qa.csv")
    table = summarise(results, args)
    (args.out / "ablate_qa.md").write_text(table)
    return table


if __name__ == "__main__":
    main()
