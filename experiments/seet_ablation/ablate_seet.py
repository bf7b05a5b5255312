"""SEET ablations, compute-matched: plain GRPO, SEET, and SEET without each of its parts, over
seeds, each RL phase given the same budget of policy tokens.

Variants: plain GRPO (no SEET); SEET; SEET without hints (standard environment in stages 1-2);
without interception (stage 2 without it); without anchors and the counterfactual loss; without
the curriculum (stage 3 alone for the whole run). Every variant of a seed starts its RL phase from
one model, so variants differ only in their RL phase and pair by seed: the config's SFT warm-up run
once per seed when it has one, else its `model.path` (configs/tiny.py: "embedded:base", the
pretrained embedded default, built once and shared by every seed). Each RL phase ends after the
step at which the tokens its policy sampled (every reply, retries and intercepted attempts
included: `train.max_policy_tokens`) reach `--policy_tokens`, so a variant that retries more runs
fewer steps; `--max_steps` caps it (a run stopped by the cap is not compute-matched, and
ablation.md says so). The SEET curriculum is the config's own (the main job's, for
configs/testbed.py), or, with `--steps=N`, laid over N RL steps (stages 1 and 2 a fifth each,
stage 3 two fifths), with stage 4 until the run ends either way.

    python experiments/seet_ablation/ablate_seet.py --out=experiments/seet_ablation/results/ablation
    python experiments/seet_ablation/ablate_seet.py --workers=4     # four cells at once, a process each
    python experiments/seet_ablation/ablate_seet.py --shard=1/3     # host 1 of 3 sharing --out
    python experiments/seet_ablation/ablate_seet.py --summarise_only   # outputs from finished cells

Writes to <out>: ablation.csv (one row per run: its steps and tokens, start and final accuracy,
steps / env steps / policy tokens to the threshold), curves.csv (one row per run and RL step),
ablation.md (means over seeds with 95% expanded percentile-bootstrap intervals, and paired
differences from plain GRPO) and ablation.png (learning curves against policy tokens with bands, final
held-out accuracy and env steps to threshold with their intervals). Every cell's result is kept in
its workdir: rerunning the same command after an interruption, or on another shard, skips finished
cells and resumes an unfinished one from its checkpoint; a sharded run summarises nothing (run
--summarise_only once every shard is done). A finished cell's `ablation_result.json` holds all the
summary reads (its figures, its RL steps' curve rows and its held-out tasks) and is kept in git
(its checkpoints and models are not), so a grid finished over several sessions or machines is
summarised anywhere.

Workers share the host's devices: on CPU its cores; on a GPU each worker allocates memory as it
needs it (XLA_PYTHON_CLIENT_PREALLOCATE=false), so N tiny runs fit on one device.
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
from grid import (  # noqa: E402
    Estimate,
    bootstrap_mean,
    cached_run,
    finished,
    paired_difference,
    parse_shard,
    run_cells,
    set_field,
    shard,
    trailing_mean,
    warm_up,
    write_csv,
)

from seetjax.config.sections import load_config_file  # noqa: E402
from seetjax.defaults.base_model import resolve_model_path  # noqa: E402
from seetjax.envs.bfcl.checker import EMPTY_TURN  # noqa: E402
from seetjax.report.bootstrap import bootstrap_interval, two_level_interval  # noqa: E402
from seetjax.report.plots import read_metrics  # noqa: E402
from seetjax.rl.trainer import TrainRun  # noqa: E402
from seetjax.runtime.cache import enable_compilation_cache  # noqa: E402

BRANCH = {"rollout.branch.points": "every_call", "rollout.branch.k": 2,
          "rollout.branch.max_forks": 2}
VARIANTS: dict[str, dict[str, object]] = {
    "grpo": {"seet.enabled": False, "learner.counterfactual_weight": 0.0},
    # GiGPO (issue 44): GRPO plus step advantages within groups of equal environment states
    "gigpo": {"seet.enabled": False, "learner.counterfactual_weight": 0.0,
              "learner.algorithm": "gigpo"},
    # branching rollouts (issue 44): 2 branch rows at each of an episode's first 2 calls that
    # ran; compute-matched by policy tokens, branches' own tokens counted
    "branch": {"seet.enabled": False, "learner.counterfactual_weight": 0.0, **BRANCH},
    "gigpo+branch": {"seet.enabled": False, "learner.counterfactual_weight": 0.0,
                     "learner.algorithm": "gigpo", **BRANCH},
    # branches played to their fork turn's end only (cheaper: more forks per token budget),
    # every return ending with its turn, so siblings are judged on the same turn
    "gigpo+branch_turn": {"seet.enabled": False, "learner.counterfactual_weight": 0.0,
                          "learner.algorithm": "gigpo", "learner.advantage": {"horizon": "turn"},
                          **BRANCH, "rollout.branch.until": "turn"},
    "seet": {},
    # SEET on branching rollouts (issue 44 item 3): a failed step's record takes a verified
    # branch's on-policy reply from the same state as its target, where one exists
    "seet+branch": dict(BRANCH),
    # branches at each failed turn's first point of logical divergence (FPLD against the
    # turn's ground truth), 2 rows resampling that reply, at most 2 turns an episode
    "branch_divergence": {"seet.enabled": False, "learner.counterfactual_weight": 0.0,
                          **BRANCH, "rollout.branch.points": "divergence"},
    # asynchronous RL (issue 43): each step's rollouts play during the previous update, with
    # weights one version old, under the decoupled objective (docs/rollout.md)
    "grpo_async": {"seet.enabled": False, "learner.counterfactual_weight": 0.0,
                   "rollout.schedule": "async", "rollout.max_staleness": 1},
    "seet_async": {"rollout.schedule": "async", "rollout.max_staleness": 1},
    "seet_no_hints": {"seet.stage1.env_mode": "standard", "seet.stage2.env_mode": "standard"},
    "seet_no_interception": {"seet.stage2.interception": False},
    "seet_no_anchors": {"learner.counterfactual_weight": 0.0, "seet.max_pairs": 0,
                        **{f"seet.stage{k}.counterfactual": False for k in (1, 2, 3, 4)}},
    "seet_no_curriculum": {"seet.start_stage": 3, "seet.single_stage": True},
}
REFERENCE = "grpo"  # paired differences are taken from it
HELDOUT = "test"  # the evaluation split of the final held-out accuracy
CURVE_POINTS = 100  # the common policy-token grid the learning curves are interpolated onto
# what a cell's result keeps of its metrics (per RL step) and of its held-out report (per task)
CURVE_KEYS = ("step", "rollout/cumulative_policy_tokens", "rollout/replies",
              "rollout/checked_turn_accuracy")
HELDOUT_KEYS = ("id", "valid", "checked_turn_accuracy", "error_type")
DETAIL_KEYS = ("curve", "heldout")  # in a cell's result, not in ablation.csv


def cells(variants: list[str], seeds: list[int]) -> list[tuple[str, int]]:
    """(variant, seed) of every run. Seeds vary fastest, so the first cells of a parallel grid
    build different seeds' warm-ups at once instead of queueing on one seed's lock."""
    return [(v, s) for v in variants for s in seeds]


def cell_name(variant: str, seed: int) -> str:
    return f"{variant}_s{seed}"


def base_config(args):
    config = load_config_file(args.config)
    config.train.steps = args.max_steps
    config.train.max_policy_tokens = args.policy_tokens
    if args.steps:
        config.train.checkpoint_every = args.steps
        fifth = max(1, args.steps // 5)
        config.seet.stage1.steps, config.seet.stage2.steps, config.seet.stage3.steps = (
            fifth, fifth, 2 * fifth)
    # the held-out count is the flag's; the milestones' training-task figures keep the config's
    config.eval.splits = f"{HELDOUT}@{args.per_category}"
    config.eval.decodings = "lenient"  # variants compare under one reading; official: evaluate.py
    return config


def curriculum(args) -> tuple[int, int, int]:
    """The RL steps of SEET's stages 1-3 in the grid's cells."""
    seet = base_config(args).seet
    return seet.stage1.steps, seet.stage2.steps, seet.stage3.steps


def cell_config(variant: str, seed: int, warm: Path, args):
    """One cell's run config: the variant's RL phase from the seed's warm-up model `warm`."""
    config = base_config(args)
    config.seed = seed
    config.model.path = str(warm)
    config.sft.enabled = False
    for dotted, value in VARIANTS[variant].items():
        set_field(config, dotted, value)
    return config


def split_turn_accuracy(split: dict) -> float:
    """A BFCL split report's checked-turn accuracy, the mean over its categories."""
    return float(np.mean(list(split["turn_pass_rate"].values())))


def train_cell(variant: str, seed: int, warm: Path, args) -> dict:
    """Trains one cell from its seed's warm-up model; its figures."""
    config = cell_config(variant, seed, warm, args)
    workdir = args.out / cell_name(variant, seed)
    shared = args.out / "start_evals" if not base_config(args).sft.enabled else None
    if shared is not None:
        share_start_evals(shared, workdir / "evals", into_cell=True)
    summary = TrainRun(config, workdir).run()
    if shared is not None:
        share_start_evals(shared, workdir / "evals", into_cell=False)
    start, end = summary["evals"]["after_sft"], summary["evals"]["after_rl"]
    rows = rl_rows(read_metrics(workdir / "metrics.jsonl"))
    last = rows[-1]
    tokens = int(last["rollout/cumulative_policy_tokens"])
    return {"variant": variant, "seed": seed, "rl_steps": int(last["step"]),
            "policy_tokens": tokens, "policy_token_budget": args.policy_tokens,
            "stopped_by": ("budget" if args.policy_tokens and tokens >= args.policy_tokens
                           else "max_steps"),
            "episodes_per_step": config.data.tasks_per_step * config.rollout.group_size,
            "start_train_turn_accuracy": start["tasks"]["checked_turn_accuracy"],
            "train_turn_accuracy": end["tasks"]["checked_turn_accuracy"],
            "start_test_turn_accuracy": split_turn_accuracy(start["splits"][HELDOUT]),
            "test_turn_accuracy": split_turn_accuracy(end["splits"][HELDOUT]),
            "test_overall": end["splits"][HELDOUT]["overall"],
            "minutes": summary["seconds"] / 60,
            "curve": [{k: r[k] for k in CURVE_KEYS} for r in rows],
            "heldout": [{k: e.get(k) for k in HELDOUT_KEYS}
                        for e in end["splits"][HELDOUT]["entries"]]}


START_MILESTONES = ("untrained.json", "after_sft.json")


def share_start_evals(shared: Path, evals: Path, into_cell: bool) -> None:
    """Every cell of a grid without per-seed warm-ups starts from one model and evaluates it
    greedily on the same tasks in the same conditions (the variants differ in RL only), so its
    start milestone is the same file (`test_ablate_seet.py` checks two cells'): the first
    finished cell's are kept in `shared` and copied into later cells' `evals`, where TrainRun
    reads them instead of evaluating again. Copies go through a temporary name (parallel cells)."""
    source, target = (shared, evals) if into_cell else (evals, shared)
    if not (source / START_MILESTONES[0]).exists():
        return
    target.mkdir(parents=True, exist_ok=True)
    for name in START_MILESTONES:  # a run without a warm-up keeps "untrained" only
        if (source / name).exists() and not (target / name).exists():
            tmp = target / f".{name}.{os.getpid()}"
            shutil.copyfile(source / name, tmp)
            os.replace(tmp, target / name)


def run_cell(cell: tuple[str, int], args) -> dict:
    """One grid cell, in whichever process runs it: the seed's warm-up (built once, under its
    lock), then the cell's run unless its result is kept already."""
    enable_compilation_cache()
    variant, seed = cell
    config = base_config(args)
    if config.sft.enabled:
        sft = config.sft.run.copy_and_resolve_references()
        sft.seed = seed
        warm = warm_up(sft, args.out / f"sft_s{seed}")
    else:  # the config's own start ("embedded:base": built once, cached), shared by the seeds
        warm = resolve_model_path(config.model.path)
    return cached_run(args.out / cell_name(variant, seed),
                      functools.partial(train_cell, variant, seed, warm, args))


def start_of_rl(args, runs: list[dict]) -> str:
    """Where every run's RL phase starts, and its held-out turn accuracy there."""
    config = base_config(args)
    start = ("Each seed's SFT warm-up is shared by every variant of that seed" if config.sft.enabled
             else f"Every run starts from the config's model ({config.model.path or 'embedded'}, "
                  "the same for every seed)")
    return (f"{start}, at held-out turn accuracy "
            f"{np.mean([r['start_test_turn_accuracy'] for r in runs]):.3f}")


# ---------------------------------------------------------------- curves and thresholds

def rl_rows(rows: list[dict]) -> list[dict]:
    """The RL steps' rows of a metrics.jsonl (not the evaluations')."""
    return [r for r in rows if "rollout/cumulative_policy_tokens" in r]


def curve(rows: list[dict], window: int, episodes_per_step: int) -> dict[str, np.ndarray]:
    """Per RL step of a run: cumulative policy tokens and environment steps (replies of all the
    step's episodes, retries included), the rollouts' checked-turn accuracy and its trailing
    mean over `window` steps (one step's few tasks are too few to judge by)."""
    rl = rl_rows(rows)
    accuracy = np.array([r["rollout/checked_turn_accuracy"] for r in rl], float)
    return {"step": np.array([r["step"] for r in rl], float),
            "policy_tokens": np.array([r["rollout/cumulative_policy_tokens"] for r in rl], float),
            "env_steps": np.cumsum([r["rollout/replies"] * episodes_per_step for r in rl]),
            "accuracy": accuracy, "trailing": trailing_mean(accuracy, window)}


def threshold_crossing(run: dict[str, np.ndarray], threshold: float, window: int
                       ) -> dict[str, float]:
    """RL steps, environment steps and policy tokens until the trailing accuracy over a full
    `window` of steps first reaches `threshold` (nan when it never does)."""
    reached = np.flatnonzero(run["trailing"][window - 1:] >= threshold)
    i = reached[0] + window - 1 if reached.size else None
    return {f"{k}_to_threshold": float(run[k][i]) if i is not None else float("nan")
            for k in ("step", "env_steps", "policy_tokens")}


def on_grid(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """y(x) linearly interpolated at `grid`; nan outside the run's range of x (no
    extrapolation: a run contributes to a band only where it has data)."""
    return np.interp(grid, x, y, left=np.nan, right=np.nan)


def band(runs: np.ndarray, **bootstrap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[runs, points] -> the mean over runs at each point and its bootstrap interval."""
    estimates = [bootstrap_mean(runs[:, j], **bootstrap) for j in range(runs.shape[1])]
    return tuple(np.array([getattr(e, k) for e in estimates]) for k in ("mean", "low", "high"))


# ---------------------------------------------------------------- the summary

def summarise(results: list[dict], args) -> tuple[list[dict], list[dict], str]:
    """(ablation.csv rows, curves.csv rows, ablation.md) from the finished cells' `results`;
    draws ablation.png."""
    boot = dict(resamples=args.resamples, seed=args.bootstrap_seed)
    runs, curve_rows, curves = [], [], {}
    for r in results:
        if not set(DETAIL_KEYS) <= set(r):
            raise ValueError(f"cell {cell_name(r['variant'], r['seed'])}: its result predates "
                             f"{DETAIL_KEYS} (2026-11-28); delete its ablation_result.json to "
                             "finish it again from its checkpoint")
        c = curve(r["curve"], args.window, r["episodes_per_step"])
        curves[r["variant"], r["seed"]] = c
        runs.append({**r, **threshold_crossing(c, args.threshold, args.window),
                     "test_silent": silent_share(r["heldout"])})
        curve_rows += [{"variant": r["variant"], "seed": r["seed"], "step": int(c["step"][i]),
                        "policy_tokens": int(c["policy_tokens"][i]),
                        "env_steps": float(c["env_steps"][i]),
                        "checked_turn_accuracy": float(c["accuracy"][i]),
                        "trailing_accuracy": float(c["trailing"][i])}
                       for i in range(len(c["step"]))]
    variants = [v for v in args.variants if any(r["variant"] == v for r in runs)]

    def by_seed(variant: str, key: str) -> dict[int, float]:
        return {r["seed"]: float(r[key]) for r in runs if r["variant"] == variant}

    def delta(variant: str, key: str, fmt: str) -> str:
        if variant == REFERENCE or REFERENCE not in variants:
            return "-"
        d = paired_difference(by_seed(variant, key), by_seed(REFERENCE, key), **boot)
        return f"{d.mean:+{fmt}} [{d.low:+{fmt}}, {d.high:+{fmt}}] ({d.n})" if d.n else "-"

    capped = [cell_name(r["variant"], r["seed"]) for r in runs if r["stopped_by"] != "budget"]
    budgets = sorted({r["policy_token_budget"] for r in runs})
    lines = [
        f"Command: `python experiments/seet_ablation/ablate_seet.py {command_flags(args)}`, "
        f"{datetime.date.today().isoformat()}; {len(runs)} runs, mean "
        f"{np.mean([r['minutes'] for r in runs]):.1f} min each. {start_of_rl(args, runs)}; "
        "each RL phase then runs until its policy has sampled "
        f"{' / '.join(map(str, budgets))} tokens (every reply's, retries and intercepted "
        f"attempts included; 0: no budget), at most {args.max_steps} steps; SEET's stages 1-3 "
        f"last {', '.join(map(str, curriculum(args)))} steps, stage 4 the rest. Means over seeds "
        f"with 95% percentile-bootstrap intervals, expanded for the number of seeds "
        f"(Hesterberg 2015; {args.resamples} resamples, seed {args.bootstrap_seed}); Δ: the mean "
        f"difference from {REFERENCE}, paired by seed, over the seeds both have (n), with its "
        "interval. Held-out: greedy checked-turn accuracy (mean over categories) and BFCL "
        f"overall on the `{HELDOUT}` split ({args.per_category} per category) after the RL "
        "phase, in BFCL's conditions; failed silent: the share of held-out tasks whose first "
        "failure is a turn that expected calls and got no parsed one (BFCL's "
        "`empty_turn_model_response`). "
        "Env steps to threshold: environment steps (replies of every episode, retries included) "
        f"until the rollouts' checked-turn accuracy, averaged over {args.window} RL steps, "
        f"reaches {args.threshold}; its mean and Δ cover the runs that reach it (reached).", ""]
    if capped:
        lines += [f"**Not compute-matched:** {len(capped)} run(s) hit the step cap before the "
                  f"token budget: {', '.join(capped)}.", ""]
    lines += ["| variant | runs | RL steps | policy tokens | held-out turn acc. | Δ | "
              "held-out BFCL overall | Δ | failed silent | env steps to threshold | reached | Δ |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    estimates: dict[str, dict[str, Estimate]] = {}
    for v in variants:
        mine = [r for r in runs if r["variant"] == v]
        estimates[v] = {k: bootstrap_mean([r[k] for r in mine], **boot)
                        for k in ("test_turn_accuracy", "test_overall", "test_silent",
                                  "env_steps_to_threshold")}
        steps = [r["rl_steps"] for r in mine]
        lines.append(
            f"| {v} | {len(mine)} | {np.mean(steps):.1f} ({min(steps)}-{max(steps)}) | "
            f"{np.mean([r['policy_tokens'] for r in mine]):.0f} | "
            f"{estimates[v]['test_turn_accuracy'].cell()} | "
            f"{delta(v, 'test_turn_accuracy', '.3f')} | {estimates[v]['test_overall'].cell()} | "
            f"{delta(v, 'test_overall', '.3f')} | {estimates[v]['test_silent'].cell()} | "
            f"{estimates[v]['env_steps_to_threshold'].cell('.0f')} | "
            f"{estimates[v]['env_steps_to_threshold'].n}/{len(mine)} | "
            f"{delta(v, 'env_steps_to_threshold', '.0f')} |")
    if REFERENCE in variants:
        lines += task_level_table(args, runs, variants)
    plot(curves, estimates, variants, args)
    return runs, curve_rows, "\n".join(lines) + "\n"


def silent_share(entries: list[dict]) -> float:
    """The share of the held-out tasks whose first failure is a turn that expected calls and got
    no parsed one: a policy that learned to stop calling (per-call penalties invite it) shows
    here first."""
    return sum(e["error_type"] == EMPTY_TURN for e in entries) / len(entries)


def heldout_tasks(run: dict) -> dict[str, tuple[float, float]]:
    """A finished cell's held-out tasks after its RL phase: id -> (solved, checked-turn accuracy;
    nan where the report predates that field)."""
    return {e["id"]: (float(e["valid"]), float(e["checked_turn_accuracy"]
                                               if e["checked_turn_accuracy"] is not None
                                               else "nan"))
            for e in run["heldout"]}


def per_task_differences(runs: list[dict], variant: str) -> np.ndarray:
    """[seeds, tasks, 2]: `variant` minus the reference on each held-out task (solved,
    checked-turn accuracy), over the seeds both have and the tasks both were scored on."""
    def by_seed(v: str) -> dict[int, dict]:
        return {r["seed"]: heldout_tasks(r) for r in runs if r["variant"] == v}

    mine, reference = by_seed(variant), by_seed(REFERENCE)
    seeds = sorted(set(mine) & set(reference))
    tasks = sorted(set.intersection(*(set(mine[s]) & set(reference[s]) for s in seeds))
                   if seeds else ())
    return np.array([[np.subtract(mine[s][t], reference[s][t]) for t in tasks] for s in seeds])


def task_level_table(args, runs: list[dict], variants: list[str]) -> list[str]:
    """ablation.md's paired differences from the reference on the held-out tasks, with
    intervals over seeds alone and over seeds and tasks (`two_level_interval`): the table above
    resamples seeds only, so it leaves out the noise of scoring every run on one finite task set."""
    boot = dict(resamples=args.resamples, seed=args.bootstrap_seed, expanded=True)

    def cell(values: np.ndarray, interval: tuple[float, float], fmt: str) -> str:
        return f"{values.mean():+{fmt}} [{interval[0]:+{fmt}}, {interval[1]:+{fmt}}]"

    lines = []
    for v in variants:
        if v == REFERENCE:
            continue
        diff = per_task_differences(runs, v)
        if not diff.size:
            continue
        points, turns = diff[..., 0] * 100, diff[..., 1]
        over_seeds = bootstrap_interval(points.mean(axis=1), **boot)
        turn_cell = ("-" if np.isnan(turns).any() else
                     cell(turns, two_level_interval(turns, **boot), ".3f"))
        lines.append(f"| {v} | {diff.shape[0]} x {diff.shape[1]} | "
                     f"{cell(points, over_seeds, '.1f')} | "
                     f"{cell(points, two_level_interval(points, **boot), '.1f')} | {turn_cell} |")
    if not lines:
        return []
    return ["", f"Held-out tasks, each variant minus {REFERENCE} on the same task and seed: tasks "
            "solved (points) with its 95% interval over seeds, then over seeds and tasks (both "
            "resampled: `seetjax.report.bootstrap.two_level_interval`), and per-task checked-turn "
            "accuracy (a turn never reached fails) over seeds and tasks.", "",
            "| variant | seeds x tasks | tasks solved Δ, over seeds | over seeds and tasks | "
            "checked-turn acc. Δ, over seeds and tasks |", "|---|---|---|---|---|", *lines]


def command_flags(args) -> str:
    """The flags that shape the grid's figures, as ablation.md quotes them."""
    config = Path(args.config).resolve()
    return " ".join(
        [f"--config={config.relative_to(ROOT) if config.is_relative_to(ROOT) else config}"]
        + [f"--{k}={','.join(map(str, getattr(args, k)))}" for k in ("seeds", "variants")]
        + [f"--{k}={getattr(args, k)}" for k in ("policy_tokens", "steps", "max_steps",
                                                 "per_category", "threshold", "window",
                                                 "resamples")])


def plot(curves: dict[tuple[str, int], dict[str, np.ndarray]],
         estimates: dict[str, dict[str, Estimate]], variants: list[str], args) -> None:
    """ablation.png: per variant, the rollouts' trailing checked-turn accuracy against policy
    tokens (each run interpolated onto one grid; mean and 95% band over seeds), and the final
    held-out turn accuracy and env steps to threshold with their intervals."""
    boot = dict(resamples=args.resamples, seed=args.bootstrap_seed)
    # up to the budget, which every compute-matched run reaches (past it, fewer runs would count)
    end = args.policy_tokens or max(c["policy_tokens"][-1] for c in curves.values())
    grid = np.linspace(0.0, end, CURVE_POINTS)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4), gridspec_kw={"width_ratios": [2, 1, 1]})
    for i, v in enumerate(variants):
        color = f"C{i}"
        runs = np.array([on_grid(c["policy_tokens"], c["trailing"], grid)
                         for (name, _), c in curves.items() if name == v])
        mean, low, high = band(runs, **boot)
        axes[0].plot(grid, mean, color=color, label=v)
        axes[0].fill_between(grid, low, high, color=color, alpha=0.2)
        for ax, key in zip(axes[1:], ("test_turn_accuracy", "env_steps_to_threshold")):
            e = estimates[v][key]
            if e.n:
                ax.errorbar([i], [e.mean], yerr=[[e.mean - e.low], [e.high - e.mean]], fmt="o",
                            color=color, capsize=4)
    axes[0].set(xlabel="policy tokens sampled (retries included)",
                ylabel=f"rollout checked-turn accuracy\n(mean of {args.window} steps)",
                title="learning curves (mean, 95% band over seeds)")
    axes[0].legend(fontsize=8)
    labels = [v.replace("seet_", "").replace("_", "\n") for v in variants]
    for ax, title in zip(axes[1:], (f"held-out ({HELDOUT}) turn accuracy, 95% CI",
                                    f"env steps to {args.threshold} (runs reaching it)")):
        ax.set_xticks(range(len(variants)), labels, fontsize=8)
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out / "ablation.png", dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "testbed.py",
                        help="the base run config every cell starts from")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments/seet_ablation/results/ablation")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")],
                        default=[0, 1, 2, 3, 4])
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    # About 20 plain-GRPO steps of configs/testbed.py (16 episodes sampled ~600 policy tokens a
    # step in 2026-11-25 runs), past its 14 curriculum steps; ablation.md names any run the step
    # cap stopped first.
    parser.add_argument("--policy_tokens", type=int, default=12_000,
                        help="policy tokens each RL phase samples (train.max_policy_tokens)")
    parser.add_argument("--steps", type=int, default=0,
                        help="RL steps the SEET curriculum is laid over (0: the config's own)")
    parser.add_argument("--max_steps", type=int, default=30, help="RL steps at most (the cap)")
    parser.add_argument("--per_category", type=int, default=8,
                        help="held-out evaluation tasks per category")
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="rollout checked-turn accuracy for env steps to threshold")
    parser.add_argument("--window", type=int, default=4, help="RL steps averaged for it")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    parser.add_argument("--bootstrap_seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1,
                        help="cells run at once, each in a process of its own")
    parser.add_argument("--shard", type=parse_shard, default=(0, 1),
                        help="i/n: run only the cells whose index mod n is i")
    parser.add_argument("--summarise_only", action="store_true",
                        help="write the outputs from the finished cells; run nothing")
    args = parser.parse_args(argv)
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    if min(args.policy_tokens, args.steps) < 0 or min(args.max_steps, args.window) < 1:
        parser.error("--policy_tokens and --steps must be >= 0; --max_steps and --window >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    grid = cells(args.variants, args.seeds)
    failed = []
    if sum(curriculum(args)) >= args.max_steps:
        print(f"warning: SEET's stages 1-3 last {sum(curriculum(args))} steps, --max_steps="
              f"{args.max_steps}: no SEET cell reaches stage 4", file=sys.stderr)
    if not args.summarise_only:
        config = base_config(args)
        if not config.sft.enabled:  # build a cached start (embedded:base) once, not per worker
            resolve_model_path(config.model.path)
        _, failed = run_cells(functools.partial(run_cell, args=args), shard(grid, *args.shard),
                              args.workers)
        for (variant, seed), error in failed:
            print(f"cell {cell_name(variant, seed)} failed: {error}", file=sys.stderr)
        if args.shard[1] > 1:
            print(f"shard {args.shard[0]}/{args.shard[1]} done; once every shard is, run "
                  "--summarise_only")
            return 1 if failed else 0
    results = [r for r in (finished(args.out / cell_name(*c)) for c in grid) if r is not None]
    if not results:
        print("no finished cells to summarise", file=sys.stderr)
        return 1
    runs, curve_rows, table = summarise(results, args)
    missing = len(grid) - len(results)
    if missing:
        started = sum((args.out / cell_name(*c)).exists() for c in grid) - len(results)
        table += (f"\n{missing} of {len(grid)} cells have no result ({started} started and "
                  f"unfinished, {missing - started} not run); this covers the others.\n")
    write_csv([{k: v for k, v in r.items() if k not in DETAIL_KEYS} for r in runs],
              args.out / "ablation.csv")
    write_csv(curve_rows, args.out / "curves.csv")
    (args.out / "ablation.md").write_text(table)
    print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
