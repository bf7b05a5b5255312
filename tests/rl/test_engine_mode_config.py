"""`config.rollout.mode="engine"` in a run's config: evaluations stay in lock step, and what the
engine cannot play (teams, branching, a mesh that splits the sampling batch) is refused naming the
field, before anything loads."""

from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.rl.config import build_plan
from seetjax.rl.trainer import TrainRun

ROOT = Path(__file__).resolve().parents[2]


def config_of(name: str, **rollout):
    config = load_config_file(ROOT / "configs" / name)
    config.rollout.update(rollout)
    return config


def test_the_mode_is_a_config_key_lock_step_by_default_and_evaluations_stay_there():
    assert config_of("tiny.py").rollout.mode == "lockstep"  # so --config.rollout.mode= parses
    plan = build_plan(config_of("tiny.py", mode="engine"))
    assert plan.rollout.mode == "engine" and plan.eval_rollout.mode == "lockstep"


def test_multi_agent_runs_are_refused_in_engine_mode():
    build_plan(config_of("qa_multi_agent.py"))
    with pytest.raises(ValueError, match=r"config.rollout.mode='engine': with "
                                         r"config.multi_agent.enabled=True: teams play in lock"):
        build_plan(config_of("qa_multi_agent.py", mode="engine"))


def test_branching_runs_are_refused_in_engine_mode():
    config = config_of("tiny.py", mode="engine")
    config.rollout.branch.points = "every_call"
    with pytest.raises(ValueError, match=r"config.rollout: RolloutConfig.mode='engine'.*branch"):
        build_plan(config)


def test_a_mesh_that_splits_the_sampling_batch_is_refused_before_anything_loads(tmp_path):
    config = config_of("tiny.py", mode="engine")  # the tests' 8 CPU devices, data=-1
    with pytest.raises(ValueError, match=r"config.rollout.mode='engine': the engine's rows are "
                                         r"not split over devices, and config.learner.mesh="
                                         r"\(-1, 1, 1\) splits the sampling batch 8 ways"):
        TrainRun(config, tmp_path)
    assert not (tmp_path / "config.json").exists()
