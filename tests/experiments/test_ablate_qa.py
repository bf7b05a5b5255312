"""experiments/ablate_qa.py: every cell is a valid run config with its algorithm and lambda; the
grid's cells and names."""

import importlib.util
from argparse import Namespace
from pathlib import Path

import pytest

from seetjax.train_config import build_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ablate():
    spec = importlib.util.spec_from_file_location("ablate_qa", ROOT / "experiments" / "ablate_qa.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ARGS = Namespace(steps=3, questions=4, tasks_per_step=2, eval_questions=4)


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
    assert names[-2:] == ["grpo_l0_s0", "grpo_l0.3_s0"] and "ppo_l0.1_s2" in names
