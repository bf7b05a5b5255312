"""experiments/qa_algorithms/ablate_qa.py: every cell is a valid run config with its algorithm and lambda; the
grid's cells and names."""

import csv
import json
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from seetjax.rl.config import build_plan


@pytest.fixture(scope="module")
def ablate(experiment):
    return experiment("qa_algorithms/ablate_qa.py")


QA_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "qa_search.py"
ARGS = Namespace(steps=3, questions=4, tasks_per_step=2, eval_questions=4, config=QA_CONFIG)


@pytest.mark.parametrize("algorithm, advantage", [
    ("reinforce", "reinforce"), ("reinforce_baseline", "reinforce"), ("rloo", "rloo"),
    ("grpo", "grpo"), ("ppo", "gae")])
def test_every_cell_is_a_valid_plan(ablate, algorithm, advantage):
    plan = build_plan(ablate.cell_config(algorithm, 0.3, 1, Path("/warm"), ARGS))
    assert plan.learner.advantage == advantage and plan.rollout.env.search_cost == 0.3
    if algorithm.startswith("reinforce"):
        baseline = "none" if algorithm == "reinforce" else "batch-mean"
        assert plan.learner.advantage_config.baseline == baseline


def test_the_grid_compares_algorithms_then_sweeps_lambda(ablate):
    names = [ablate.cell_name(*c) for c in ablate.cells([0, 1, 2], [0])]
    assert len(names) == 5 * 3 + 2 and len(set(names)) == len(names)
    assert names[-2:] == ["rloo_l0_s0", "rloo_l0.3_s0"] and "ppo_l0.1_s2" in names
    swept = [ablate.cell_name(*c) for c in ablate.cells([0], [0, 1], ("grpo", "rloo"))]
    assert swept[5:] == ["grpo_l0_s0", "grpo_l0_s1", "grpo_l0.3_s0", "grpo_l0.3_s1",
                         "rloo_l0_s0", "rloo_l0_s1", "rloo_l0.3_s0", "rloo_l0.3_s1"]


def finished_cells(ablate, out: Path, grid, value) -> list[dict]:
    """Cells of `grid` as if run: three steps of metrics in each workdir under `out`, and results
    whose every start and end figure is value(lambda, seed)."""
    results = []
    for algorithm, lam, seed in grid:
        workdir = out / ablate.cell_name(algorithm, lam, seed)
        workdir.mkdir()
        rows = [{"step": s, "rollout/reward": 0.1 * s, "rollout/env_f1": 0.0,
                 "rollout/env_searches": 1.0 - lam, "learner/grad_variance": 0.5,
                 "learner/grad_norm": 1.0} for s in (1, 2, 3)]
        (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        results.append({"algorithm": algorithm, "lambda": lam, "seed": seed,
                        **{f"{p}_{k}": value(lam, seed) for p in ("start", "end")
                           for k in ("reward", "exact_match", "f1", "searches")},
                        "reward_gain": 0.0, "grad_variance": 0.5, "grad_variance_rel": 0.5,
                        "updates": 3, "curves": ablate.step_curves(workdir)})
    return results


def test_a_cells_curves_are_its_metrics_per_step(ablate, tmp_path):
    rows = [{"step": 1, "rollout/reward": 0.5, "rollout/env_f1": 0.25,
             "rollout/env_searches": 1.0},  # no update: no grad variance
            {"step": 1, "eval/qa_test_f1": 0.9},  # an evaluation's row is not a step's
            {"step": 3, "rollout/reward": 0.7, "rollout/env_f1": 0.5,
             "rollout/env_searches": 0.5, "learner/grad_variance": 2.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = ablate.step_curves(tmp_path)
    assert got == {"rollout/reward": [0.5, None, 0.7], "rollout/env_f1": [0.25, None, 0.5],
                   "rollout/env_searches": [1.0, None, 0.5],
                   "learner/grad_variance": [None, None, 2.0]}
    two = [{"curves": got}, {"curves": {**got, "rollout/reward": [0.1, 0.2]}}]
    np.testing.assert_allclose(ablate.curves(two, "rollout/reward"), [0.3, 0.2, 0.7])
    assert np.isnan(ablate.curves(two, "learner/grad_variance")[0])


def test_the_figure_smooths_each_step_over_the_finite_values_of_its_window(ablate):
    values = np.array([1.0, np.nan, 3.0, 5.0, np.nan, np.nan, np.nan])
    np.testing.assert_allclose(ablate.trailing_mean(values, 2),
                               [1.0, 1.0, 3.0, 4.0, 5.0, np.nan, np.nan])
    np.testing.assert_allclose(ablate.trailing_mean(values, 3), [1.0, 1.0, 2.0, 4.0, 4.0, 5.0,
                                                                 np.nan])
    # without gaps: each window's plain mean, fewer values at the start
    np.testing.assert_allclose(ablate.trailing_mean(np.array([2.0, 4.0, 6.0, 8.0]), 2),
                               [2.0, 3.0, 5.0, 7.0])


def test_a_finished_grid_is_summarised_without_its_warm_up(ablate, tmp_path, monkeypatch):
    """Finished cells' results (kept in git) are all a summary needs: no warm-up is trained."""
    grid = ablate.cells([0], [0], (), ("rloo",))
    for result in finished_cells(ablate, tmp_path, grid, lambda lam, seed: 0.5):
        name = ablate.cell_name(result["algorithm"], result["lambda"], result["seed"])
        (tmp_path / name / "ablation_result.json").write_text(json.dumps(result))
    monkeypatch.setattr(ablate, "warm_up", lambda *a: pytest.fail("trained a warm-up"))
    args = Namespace(**vars(ARGS), out=tmp_path, seeds=[0], sweep_seeds=[0],
                     sweep_algorithms=(), algorithms=("rloo",), only=None)
    (result,) = ablate.run(args)
    assert result["end_reward"] == 0.5
    assert result["curves"]["rollout/reward"][2] == pytest.approx(0.3)
    assert not (tmp_path / "sft").exists()


def test_summary_tables_and_figures(ablate, tmp_path):
    args = Namespace(**vars(ARGS), out=tmp_path, seeds=[0, 1], sweep_seeds=[0],
                     sweep_algorithms=("grpo", "rloo"), algorithms=tuple(ablate.ALGORITHMS))
    grid = ablate.cells(args.seeds, args.sweep_seeds, args.sweep_algorithms)
    results = finished_cells(ablate, tmp_path, grid, lambda lam, seed: 1.0 - lam)
    table = ablate.write_summary(results, args)
    assert "| grpo | 0.900 +- 0.000 |" in table and "| ppo |" in table
    assert (tmp_path / "ablate_qa.md").read_text() == table
    with open(tmp_path / "ablate_qa.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(results) and "curves" not in rows[0] and "reward_gain" in rows[0]
    for swept in ("grpo", "rloo"):
        sweep = table.split(f"Search cost sweep ({swept}, seeds 0):")[1]
        assert "| 0.3 | 0.700 +- 0.000 | 0.700 +- 0.000 | 0.700 +- 0.000 | 0.700 |" in sweep
    assert (tmp_path / "curves.png").exists() and (tmp_path / "lambda.png").exists()


def test_unset_flags_keep_the_configs_values(ablate):
    from seetjax.config.sections import load_config_file

    own = load_config_file(ablate.ROOT / "configs" / "qa_search.py")
    unset = Namespace(steps=None, questions=None, tasks_per_step=None, eval_questions=None,
                      config=ablate.DEFAULT_CONFIG)
    config = ablate.base_config(unset)
    fields = ("train.steps", "data.tasks_per_category", "data.tasks_per_step", "eval.per_category")
    assert [config[f] for f in fields] == [own[f] for f in fields]
    # A killed cell resumes from the config's last checkpoint (the last step always writes one).
    assert config.train.checkpoint_every == own.train.checkpoint_every < own.train.steps
    set_ = ablate.base_config(ARGS)
    assert [set_[f] for f in fields] == [3, 4, 2, 4]


def test_a_smaller_grid_compares_and_sweeps_only_what_it_names(ablate, tmp_path):
    import argparse

    assert ablate.algorithm_list("rloo,grpo") == ("rloo", "grpo") and ablate.algorithm_list("") == ()
    with pytest.raises(argparse.ArgumentTypeError, match="unknown \\['a2c'\\]"):
        ablate.algorithm_list("rloo,a2c")
    grid = ablate.cells([0, 1], [0], (), ("rloo",))
    assert [ablate.cell_name(*c) for c in grid] == ["rloo_l0.1_s0", "rloo_l0.1_s1"]
    args = Namespace(**vars(ARGS), out=tmp_path, seeds=[0, 1], sweep_seeds=[0],
                     sweep_algorithms=(), algorithms=("rloo",))
    results = finished_cells(ablate, tmp_path, grid, lambda lam, seed: 0.2 + 0.1 * seed)
    table = ablate.summarise(results, args)
    assert "--algorithms=rloo " in table and "--sweep_algorithms=`" in table
    assert "--config" not in table  # the default config
    assert "| rloo | 0.250 +- 0.050 |" in table and "| grpo |" not in table
    assert "Search cost sweep" not in table
    assert (tmp_path / "curves.png").exists() and not (tmp_path / "lambda.png").exists()


def test_another_config_file_is_every_cells_start(ablate, tmp_path):
    """--config: the grid runs another QA config (here one whose warm-up averages each row's
    token mean), and the summary's command names it."""
    mine = tmp_path / "mine.py"
    mine.write_text(f"""from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file({str(ablate.DEFAULT_CONFIG)!r})
    config.sft.run.learner.loss = dict(aggregation="seq-mean-token-mean")
    config.train.steps = 7
    return config
""")
    unset = Namespace(steps=None, questions=None, tasks_per_step=None, eval_questions=None,
                      config=mine)
    config = ablate.base_config(unset)
    assert config.train.steps == 7
    assert config.sft.run.learner.loss.aggregation == "seq-mean-token-mean"
    grid = ablate.cells([0], [0], (), ("rloo",))
    args = Namespace(**vars(unset), out=tmp_path, seeds=[0], sweep_seeds=[0],
                     sweep_algorithms=(), algorithms=("rloo",))
    table = ablate.summarise(finished_cells(ablate, tmp_path, grid, lambda lam, seed: 0.5), args)
    assert f"--config={mine} --seeds=0 --steps=7 " in table
