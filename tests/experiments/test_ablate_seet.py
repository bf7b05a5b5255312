"""experiments/seet_ablation/ablate_seet.py and the grid helpers it uses: variant overrides name real config
fields; bootstrap intervals (against scipy), paired differences, steps to threshold, curve
interpolation, shards, the summary; and a two-worker grid end to end."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from seetjax.envs.bfcl.checker import EMPTY_TURN
from seetjax.report.bootstrap import expanded_confidence

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ablate(experiment):
    return experiment("seet_ablation/ablate_seet.py")


@pytest.fixture(scope="module")
def grid(ablate):
    return sys.modules["grid"]  # experiments/grid.py, as the script imported it


def _rows(accuracies, replies=2.0, tokens=10):
    rows = [{"step": 0, "eval/train_checked_turn_accuracy": 0.0}]
    rows += [{"step": i + 1, "rollout/replies": replies, "rollout/checked_turn_accuracy": a,
              "rollout/policy_tokens": tokens, "rollout/cumulative_policy_tokens": tokens * (i + 1)}
             for i, a in enumerate(accuracies)]
    return rows + [{"step": len(accuracies), "eval/train_checked_turn_accuracy": 1.0}]


def test_bootstrap_interval_is_scipys_percentile_interval_at_the_expanded_level(grid):
    stats = pytest.importorskip("scipy.stats")
    sample = [0.1, 0.4, 0.35, 0.8, 0.2, 0.55, 0.3]
    mine = grid.bootstrap_mean(sample + [float("nan")], resamples=10_000, seed=3)
    level = expanded_confidence(0.95, 7)  # ~0.99: 7 seeds widen a 95% interval
    theirs = stats.bootstrap((np.array(sample),), np.mean, method="percentile",
                             n_resamples=10_000, confidence_level=level,
                             rng=np.random.default_rng(3)).confidence_interval
    assert mine.n == 7 and mine.mean == pytest.approx(np.mean(sample))
    # within Monte Carlo error whatever scipy's draws (today they are the same ones)
    assert mine.low == pytest.approx(theirs.low, abs=0.01)
    assert mine.high == pytest.approx(theirs.high, abs=0.01)
    assert grid.bootstrap_mean(sample, seed=3) == mine  # seeded: the same interval again
    assert grid.bootstrap_mean([0.4]) == grid.Estimate(0.4, 0.4, 0.4, 1)
    assert grid.bootstrap_mean([float("nan")]).n == 0 and grid.Estimate(
        math.nan, math.nan, math.nan, 0).cell() == "-"


def test_paired_difference_pairs_by_seed(grid):
    values = {0: 0.5, 1: 0.7, 2: float("nan"), 3: 0.2}
    reference = {0: 0.4, 1: 0.4, 2: 0.1}
    d = grid.paired_difference(values, reference)
    # seeds 0 and 1 pair (2 has no value, 3 no reference): differences 0.1 and 0.3, whose
    # resample means are 0.1, 0.2, 0.3 with probabilities 1/4, 1/2, 1/4
    assert d.n == 2 and d.mean == pytest.approx(0.2)
    assert (d.low, d.high) == pytest.approx((0.1, 0.3))
    # a constant gain over seeds that differ widely: paired, the interval is tight around it
    rng = np.random.default_rng(0)
    base = dict(enumerate(rng.uniform(0.0, 0.8, 8)))
    better = {s: v + 0.1 + rng.normal(0, 0.005) for s, v in base.items()}
    paired = grid.paired_difference(better, base)
    assert paired.low > 0.09 and paired.high < 0.11
    unpaired = grid.bootstrap_mean(list(better.values()))
    assert unpaired.high - unpaired.low > 10 * (paired.high - paired.low)


def test_steps_to_threshold_uses_the_window_mean(ablate):
    # A single lucky step (0.5) does not count with a window of 2; steps 4-5 average 0.4.
    accuracies = [0.0, 0.5, 0.0, 0.4, 0.4]
    run = ablate.curve(_rows(accuracies), window=2, episodes_per_step=8)
    assert run["step"].tolist() == [1, 2, 3, 4, 5]  # the evaluation rows are not RL steps
    assert run["trailing"].tolist() == pytest.approx([0.0, 0.25, 0.25, 0.2, 0.4])
    assert ablate.threshold_crossing(run, 0.3, 2) == {
        "step_to_threshold": 5, "env_steps_to_threshold": 5 * 2.0 * 8,
        "policy_tokens_to_threshold": 50}
    run = ablate.curve(_rows(accuracies), window=1, episodes_per_step=8)
    assert ablate.threshold_crossing(run, 0.3, 1)["env_steps_to_threshold"] == 2 * 2.0 * 8
    never = ablate.threshold_crossing(ablate.curve(_rows([0.1] * 5), 2, 8), 0.3, 2)
    assert all(math.isnan(v) for v in never.values())


def test_curves_interpolate_onto_a_common_grid(ablate):
    grid = np.array([0, 10, 15, 30, 40, 50], float)
    y = ablate.on_grid(np.array([10, 20, 40.0]), np.array([0, 1, 0.0]), grid)
    np.testing.assert_allclose(y, [np.nan, 0, 0.5, 0.5, 0, np.nan])  # no extrapolation
    runs = np.array([y, ablate.on_grid(np.array([0, 50.0]), np.array([1, 1.0]), grid)])
    mean, low, high = ablate.band(runs, resamples=1000)
    np.testing.assert_allclose(mean, [1, 0.5, 0.75, 0.75, 0.5, 1])  # one run where one has data
    assert np.all(low <= mean) and np.all(mean <= high) and low[0] == high[0] == 1


def test_shards_split_the_grid(grid, ablate):
    cells = ablate.cells(["grpo", "seet", "seet_no_hints"], [0, 1, 2, 3, 4])
    assert cells[:3] == [("grpo", 0), ("grpo", 1), ("grpo", 2)]  # seeds vary fastest
    shards = [grid.shard(cells, i, 4) for i in range(4)]
    assert sorted(c for s in shards for c in s) == sorted(cells)  # each cell in one shard
    assert shards[1] == [cells[i] for i in (1, 5, 9, 13)]
    assert grid.parse_shard("2/4") == (2, 4) and grid.shard(cells, 0, 1) == cells
    for bad in ("4/4", "1", "-1/2", "a/b"):
        with pytest.raises(ValueError, match="shard"):
            grid.parse_shard(bad)


@pytest.mark.parametrize("variant", ["grpo", "gigpo", "branch", "gigpo+branch", "seet",
                                     "seet_no_hints", "seet_no_interception", "seet_no_anchors",
                                     "seet_no_curriculum", "seet+branch", "branch_divergence"])
def test_every_variant_is_a_valid_plan(ablate, variant, tmp_path):
    from seetjax.rl.config import build_plan

    args = ablate.parse_args(["--out", str(tmp_path), "--policy_tokens=500", "--max_steps=9"])
    config = ablate.cell_config(variant, 3, tmp_path / "warm", args)
    assert (config.train.max_policy_tokens, config.train.steps, config.seed) == (500, 9, 3)
    config.model.path = ""
    plan = build_plan(config)
    assert plan.rollout.branch.points == ("none" if "branch" not in variant else
                                          "divergence" if "divergence" in variant else
                                          "every_call")
    assert plan.seet == variant.startswith("seet")
    assert plan.learner.advantage == ("gigpo" if "gigpo" in variant else "grpo")
    assert plan.eval_rollout.branch.points == "none"


def test_curriculum_is_the_configs_unless_steps_lay_it(ablate, tmp_path):
    from seetjax.config.sections import load_config_file

    main_job = load_config_file(ablate.ROOT / "configs" / "testbed.py").seet
    stages = lambda c: [c.seet[f"stage{k}"].steps for k in (1, 2, 3)]  # noqa: E731
    kept = ablate.base_config(ablate.parse_args(["--out", str(tmp_path)]))
    assert stages(kept) == [main_job[f"stage{k}"].steps for k in (1, 2, 3)]
    laid = ablate.base_config(ablate.parse_args(["--out", str(tmp_path), "--steps=20"]))
    assert stages(laid) == [4, 4, 8]
    with pytest.raises(SystemExit):
        ablate.parse_args(["--steps=-1"])


def test_summary_tables_curves_and_figure(ablate, tmp_path):
    args = ablate.parse_args(["--out", str(tmp_path), "--variants=grpo,seet", "--seeds=0,1,2",
                              "--policy_tokens=40", "--window=1", "--threshold=0.5",
                              "--resamples=500"])
    results = []
    for variant, seed in ablate.cells(args.variants, args.seeds):
        gain = 0.1 if variant == "seet" else 0.0
        # seet's third run is capped by the steps before its budget; grpo's never reaches 0.5
        steps = 3 if (variant, seed) == ("seet", 2) else 4
        accuracies = [min(1.0, (0.2 + gain) * (i + 1)) for i in range(steps)]
        if variant == "grpo":
            accuracies = [0.1 * seed] * steps
        # four held-out tasks: seet solves task 0 more than grpo does on every seed, and on
        # seed 1 task 3 as well; its turns are 0.25 better on every task; grpo fails task 1
        # silent (no call on a turn that expected some)
        solved = [variant == "seet", False, False, (variant, seed) == ("seet", 1)]
        entries = [{"id": f"t{i}", "valid": ok, "checked_turn_accuracy": 0.25 * gain * 10,
                    "error_type": (None if ok else EMPTY_TURN if (variant, i) == ("grpo", 1)
                                   else "multi_turn:execution_response_mismatch")}
                   for i, ok in enumerate(solved)]
        results.append({"variant": variant, "seed": seed, "rl_steps": steps,
                        "policy_tokens": 10 * steps, "policy_token_budget": 40,
                        "stopped_by": "budget" if steps == 4 else "max_steps",
                        "episodes_per_step": 8, "start_train_turn_accuracy": 0.2,
                        "train_turn_accuracy": 0.3, "start_test_turn_accuracy": 0.1 * seed,
                        "test_turn_accuracy": 0.1 * seed + gain, "test_overall": gain / 2,
                        "minutes": 1.0, "curve": _rows(accuracies), "heldout": entries})
    runs, curve_rows, table = ablate.summarise(results, args)
    # the default config (the testbed) has no warm-up: every run starts from the base
    assert ("Every run starts from the config's model (embedded:base, the same for every seed), "
            "at held-out turn accuracy 0.100;") in table
    assert "**Not compute-matched:** 1 run(s) hit the step cap before the token budget: seet_s2" \
        in table
    grpo = next(line for line in table.splitlines() if line.startswith("| grpo |"))
    seet = next(line for line in table.splitlines() if line.startswith("| seet |"))
    assert grpo.startswith("| grpo | 3 | 4.0 (4-4) | 40 | 0.100 [") and "| 3.7 (3-4) | 37 |" in seet
    assert grpo.endswith("| - | 0/3 | - |")  # never reached the threshold: counted, no mean
    assert "| +0.100 [+0.100, +0.100] (3) |" in seet  # the same gain on every seed
    assert "| 0.050 [0.050, 0.050] | +0.050 [+0.050, +0.050] (3) |" in seet  # tasks solved
    assert "| 3/3 | - |" in seet  # reached on every seed; no grpo run to pair with
    assert "| 0.250 [0.250, 0.250] | - | 0/3 |" in grpo and "| 0.000 [0.000, 0.000] | 32 [" in seet
    # per task: seeds 0 and 2 gain 25 points, seed 1 50; resampling tasks too widens the interval
    paired = next(line for line in table.splitlines() if line.startswith("| seet | 3 x 4 |"))
    over_seeds, both, turns = paired.strip("| ").split(" | ")[2:5]
    assert over_seeds == "+33.3 [+25.0, +50.0]"
    assert both.startswith("+33.3 [+0.0, ") and turns == "+0.250 [+0.250, +0.250]"
    # accuracies 0.3, 0.6: reached at step 2, env steps 2 x 2 replies x 8 episodes
    assert [r["env_steps_to_threshold"] for r in runs if r["variant"] == "seet"] == [32.0] * 3
    assert len(curve_rows) == 4 * 5 + 3 and curve_rows[0] == {
        "variant": "grpo", "seed": 0, "step": 1, "policy_tokens": 10, "env_steps": 16.0,
        "checked_turn_accuracy": 0.0, "trailing_accuracy": 0.0}
    assert (tmp_path / "ablation.png").stat().st_size > 0


def _grid_command(out, *flags):
    return [sys.executable, "experiments/seet_ablation/ablate_seet.py", f"--out={out}",
            "--config=configs/smoke.py", "--variants=grpo,seet", "--seeds=1", "--steps=2",
            # a budget of one token ends every cell after its first RL step
            "--max_steps=3", "--policy_tokens=1", "--per_category=1", "--window=1",
            "--resamples=200", *flags]


@pytest.mark.slow
def test_two_workers_run_the_grid_and_a_rerun_only_summarises(tmp_path, embedded_dir):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device a worker
    out = subprocess.run(_grid_command(tmp_path, "--workers=2"), cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = (tmp_path / "ablation.csv").read_text().splitlines()
    assert len(runs) == 1 + 2 and (tmp_path / "curves.csv").exists()
    assert (tmp_path / "ablation.png").exists() and "| seet | 1 |" in out.stdout
    assert [p.name for p in tmp_path.glob("sft_s*") if p.is_dir()] == ["sft_s1"]
    for cell in ("grpo_s1", "seet_s1"):
        result = json.loads((tmp_path / cell / "ablation_result.json").read_text())
        assert result["rl_steps"] == 1 and result["stopped_by"] == "budget"
        assert result["policy_tokens"] > 0 and result["policy_token_budget"] == 1
        assert len(result["curve"]) == 1 and result["heldout"][0]["id"]
    # the seeds' warm-ups are shared: both variants of a seed start from the same model
    configs = [json.loads((tmp_path / c / "config.json").read_text())["model"]["path"]
               for c in ("grpo_s1", "seet_s1")]
    assert configs[0] == configs[1] == str(tmp_path / "sft_s1" / "model")
    again = subprocess.run(_grid_command(tmp_path, "--shard=1/2"), cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "once every shard is" in again.stdout  # cached: no training
    # thresholds are recomputed from the results' curves: every run reaches 0 at its first
    # step; the results alone are summarised (git keeps them, not the cells' other files)
    for cell in ("grpo_s1", "seet_s1"):
        for kept in (tmp_path / cell).iterdir():
            if kept.name != "ablation_result.json":
                shutil.rmtree(kept) if kept.is_dir() else kept.unlink()
    summary = subprocess.run(_grid_command(tmp_path, "--summarise_only", "--threshold=0"),
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert summary.returncode == 0 and "| 1/1 |" in summary.stdout
    assert "--threshold=0.0" in (tmp_path / "ablation.md").read_text()


@pytest.mark.slow
def test_cells_from_one_shared_start_share_its_evaluations(tmp_path, embedded_dir):
    # No per-seed warm-up: every cell starts from the config's model. The first cell's start
    # milestones are kept and reused; a cell evaluated on its own (another grid) gets the same.
    config = tmp_path / "no_warm_up.py"
    config.write_text("from seetjax.config.sections import load_config_file\n"
                      "def get_config():\n"
                      f"    config = load_config_file({str(ROOT / 'configs' / 'smoke.py')!r})\n"
                      "    config.sft.enabled = False\n"
                      "    return config\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}

    def grid(out, variants, seeds):
        command = [c for c in _grid_command(out) if not c.startswith(("--variants", "--seeds",
                                                                      "--config", "--max_steps"))]
        done = subprocess.run(command + [f"--config={config}", f"--variants={variants}",
                                         f"--seeds={seeds}", "--max_steps=1"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]

    grid(tmp_path / "shared", "grpo,seet", "1")
    alone = tmp_path / "alone"
    grid(alone, "seet", "1")
    shared = tmp_path / "shared" / "start_evals"
    assert [p.name for p in shared.iterdir()] == ["untrained.json"]  # after_sft: the same run
    evaluated = json.loads((alone / "seet_s1" / "evals" / "untrained.json").read_text())
    assert json.loads((shared / "untrained.json").read_text()) == evaluated
    reused = tmp_path / "shared" / "seet_s1" / "evals" / "untrained.json"
    assert json.loads(reused.read_text()) == evaluated
    assert not list(tmp_path.glob("*/sft_s*"))  # no warm-up was trained
