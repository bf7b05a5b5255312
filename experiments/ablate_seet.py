"""SEET ablations on the tiny setting (configs/tiny.py), several seeds each.

Variants: plain GRPO (no SEET); SEET; SEET without hints (standard environment in stages 1-2);
without interception (stage 2 without it); without anchors and the counterfactual loss; without
the curriculum (stage 3 alone for the whole run). For each seed the SFT warm-up runs once and every
variant starts its RL phase from that model, so variants differ only in their RL phase.

    python experiments/ablate_seet.py --out=experiments/results/ablation --seeds=0,1,2

Writes <out>/ablation.csv (one row per run), <out>/ablation.png (mean +- std per variant) and
<out>/ablation.md (the table the README shows). Rerunning the same command after an interruption
skips finished runs and resumes the unfinished one from its checkpoint.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
from grid import cached_run, set_field, warm_up, write_csv  # noqa: E402

from seetjax.cache import enable_compilation_cache  # noqa: E402
from seetjax.train_config import load_config_file  # noqa: E402
from seetjax.trainer import TrainRun  # noqa: E402

VARIANTS: dict[str, dict[str, object]] = {
    "grpo": {"seet.enabled": False, "learner.counterfactual_weight": 0.0},
    "seet": {},
    "seet_no_hints": {"seet.stage1.env_mode": "standard", "seet.stage2.env_mode": "standard"},
    "seet_no_interception": {"seet.stage2.interception": False},
    "seet_no_anchors": {"learner.counterfactual_weight": 0.0, "seet.max_pairs": 0,
                        **{f"seet.stage{k}.counterfactual": False for k in (1, 2, 3, 4)}},
    "seet_no_curriculum": {"seet.start_stage": 3, "seet.single_stage": True},
}


def base_config(steps: int, per_category: int):
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.train.steps = steps
    config.train.checkpoint_every = steps
    quarter = max(1, steps // 5)
    config.seet.stage1.steps, config.seet.stage2.steps, config.seet.stage3.steps = (
        quarter, quarter, 2 * quarter)
    config.eval.per_category = per_category
    config.eval.decodings = "lenient"  # variants compare under one reading; official: evaluate.py
    return config


def steps_to_threshold(rows: list[dict], threshold: float, window: int,
                       episodes_per_step: int) -> tuple[float, float]:
    """(RL steps, environment steps) until the rollouts' checked-turn accuracy, averaged over the
    last `window` RL steps (one step's B tasks are too few to judge by), first reaches `threshold`
    (nan when it never does). Environment steps count every reply, retries included."""
    env_steps, recent = 0.0, []
    for r in rows:
        if "rollout/replies" not in r:
            continue
        env_steps += r["rollout/replies"] * episodes_per_step
        recent = (recent + [r["rollout/checked_turn_accuracy"]])[-window:]
        if len(recent) == window and np.mean(recent) >= threshold:
            return float(r["step"]), env_steps
    return float("nan"), float("nan")


def run_variant(name: str, seed: int, warm: Path, args) -> dict:
    """Trains one variant from the seed's warm-up model; its final figures."""
    variant = base_config(args.steps, args.per_category)
    variant.seed = seed
    variant.model.path = str(warm / "model")
    variant.sft.enabled = False
    for dotted, value in VARIANTS[name].items():
        set_field(variant, dotted, value)
    evals = TrainRun(variant, args.out / f"{name}_s{seed}").run()["evals"]
    test = evals["after_rl"]["splits"]["test"]
    return {"variant": name, "seed": seed,
            "train_turn_accuracy": evals["after_rl"]["tasks"]["checked_turn_accuracy"],
            "start_train_turn_accuracy": evals["after_sft"]["tasks"]["checked_turn_accuracy"],
            "test_turn_accuracy": float(np.mean(list(test["turn_pass_rate"].values()))),
            "test_overall": test["overall"]}


def run(args) -> list[dict]:
    results = []
    base = base_config(args.steps, args.per_category)
    episodes_per_step = base.data.tasks_per_step * base.rollout.group_size
    for seed in args.seeds:
        sft = base.sft.run.copy_and_resolve_references()
        sft.seed = seed
        warm = warm_up(sft, args.out / f"sft_s{seed}").parent
        for name in args.variants:
            workdir = args.out / f"{name}_s{seed}"
            # A restarted grid skips finished runs (TrainRun resumes an unfinished one).
            result = cached_run(workdir, functools.partial(run_variant, name, seed, warm, args))
            rows = [json.loads(line) for line in (workdir / "metrics.jsonl").open()]
            steps, env_steps = steps_to_threshold(rows, args.threshold, args.window,
                                                  episodes_per_step)
            results.append({**result, "steps_to_threshold": steps,
                            "env_steps_to_threshold": env_steps})
            print(results[-1], flush=True)
    return results


def summarise(results: list[dict], args) -> str:
    keys = ("start_train_turn_accuracy", "train_turn_accuracy", "test_turn_accuracy",
            "test_overall", "env_steps_to_threshold")
    lines = [f"Command: `python experiments/ablate_seet.py --seeds={','.join(map(str, args.seeds))}"
             f" --steps={args.steps} --per_category={args.per_category}"
             f" --threshold={args.threshold} --window={args.window}`, "
             f"{datetime.date.today().isoformat()}, 2-core CPU. Tiny 4M-parameter model trained "
             "from scratch (SFT warm-up shared per seed, then each variant's RL phase of "
             f"{args.steps} steps); mean +- std over {len(args.seeds)} seeds. Turn accuracy is "
             "greedy, on checked turns of the training tasks before and after the RL phase and on "
             f"{4 * args.per_category} test tasks; env steps (replies, retries included) until "
             f"the rollouts' checked-turn accuracy, averaged over {args.window} RL steps, reaches "
             f"{args.threshold} (runs that never do are left out; n says how many did).", "",
             "| variant | train turn acc., start of RL | train turn acc., end | test turn acc. "
             "| test BFCL overall | env steps to threshold (n) |",
             "|---|---|---|---|---|---|"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
    for name in args.variants:
        mine = [r for r in results if r["variant"] == name]
        cells = []
        for key in keys:
            values = np.array([r[key] for r in mine], float)
            values = values[np.isfinite(values)]
            mean, std = (values.mean(), values.std()) if values.size else (np.nan, np.nan)
            cell = f"{mean:.3f} +- {std:.3f}" if key != keys[-1] else f"{mean:.0f} +- {std:.0f}"
            cells.append(cell + (f" ({values.size})" if key == keys[-1] else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for ax, key in zip(axes, (keys[1], keys[2], keys[4])):
            values = np.array([r[key] for r in mine], float)
            values = values[np.isfinite(values)]
            ax.bar(name.replace("seet_", "").replace("_", "\n"), values.mean() if values.size
                   else 0, yerr=values.std() if values.size else 0, capsize=4)
            ax.set_title(key.replace("_", " "))
    fig.tight_layout()
    fig.savefig(args.out / "ablation.png", dpi=110)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "experiments/results/ablation")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=15, help="RL steps per run")
    parser.add_argument("--per_category", type=int, default=4, help="eval tasks per category")
    parser.add_argument("--threshold", type=float, default=0.1,
                        help="rollout checked-turn accuracy for env steps to threshold")
    parser.add_argument("--window", type=int, default=4, help="RL steps averaged for it")
    args = parser.parse_args()
    enable_compilation_cache()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        sys.exit(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(args)
    write_csv(results, args.out / "ablation.csv")
    table = summarise(results, args)
    (args.out / "ablation.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
