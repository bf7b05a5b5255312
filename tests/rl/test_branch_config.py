"""`config.rollout.branch`: parsed, validated and off by default; evaluations never branch;
GiGPO refused where the environment has no state keys (issue 44)."""

import dataclasses
from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs import registry
from seetjax.rl.config import build_plan
from seetjax.rollout.branching import BranchConfig

ROOT = Path(__file__).resolve().parents[2]


def tiny(**branch):
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.rollout.branch.update(branch)
    return config


def test_branching_is_off_by_default_and_never_in_evaluations():
    plan = build_plan(tiny())
    assert plan.rollout.branch == BranchConfig() and plan.rollout.branch.rows_per_episode == 1
    for algorithm in ("gigpo", "grpo"):
        config = tiny(points="every_call", k=2, budget=500, max_forks=3)
        config.learner.algorithm = algorithm
        plan = build_plan(config)
        assert plan.rollout.branch == BranchConfig("every_call", 2, 500, 3)
        assert plan.rollout.branch.rows_per_episode == 7  # itself and 2 branches x 3 fork points
        assert plan.eval_rollout.branch == BranchConfig()


@pytest.mark.parametrize("field,value,message", [
    ("points", "random", "config.rollout.branch: BranchConfig.points='random': must be one of"),
    ("until", "step", "config.rollout.branch: BranchConfig.until='step': must be one of"),
    ("k", 0, "config.rollout.branch: BranchConfig.k=0: must be an integer >= 1"),
    ("budget", -1, "config.rollout.branch: BranchConfig.budget=-1: must be an integer >= 0"),
    ("max_forks", 0, "config.rollout.branch: BranchConfig.max_forks=0: must be an integer >= 1"),
    ("depth", 2, r"config.rollout.branch.depth=2: unknown field\(s\) \['depth'\]"),
])
def test_bad_branch_fields_fail_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        build_plan(tiny(**{"points": "every_call", field: value}))


@pytest.mark.parametrize("algorithm", ["grpo", "gigpo"])
def test_a_turn_horizon_needs_turn_returns_and_a_reward_of_turns(algorithm):
    config = tiny(points="every_call", until="turn")
    config.learner.algorithm = algorithm
    config.reward.kind = "shaped"
    # a branch's return ends with its fork turn: its siblings' must too
    with pytest.raises(ValueError, match=r"config.rollout.branch.until='turn': ends a branch's "
                                         rf"return .* \(here '{algorithm}', horizon 'episode'\)"):
        build_plan(config)
    config.learner.advantage = {"horizon": "turn"}
    plan = build_plan(config)
    assert plan.rollout.branch.until == "turn" and plan.learner.advantage_config.horizon == "turn"
    for kind in ("env", "progress"):  # one reward per episode: no turn's return to end
        config.reward.kind = kind
        with pytest.raises(ValueError, match=rf"config.reward.kind='{kind}': learner.advantage."
                                             "horizon='turn' ends returns"):
            build_plan(config)
    config.reward.kind = "shaped"
    config.learner.algorithm = "rloo"  # no horizon: its baselines are whole returns
    del config.learner.advantage
    with pytest.raises(ValueError, match=r"\(here 'rloo', horizon None\)"):
        build_plan(config)


class NoStateEnv:
    """An environment class that does not say what its state is."""


def test_gigpo_needs_an_environment_with_state_keys(monkeypatch):
    config = tiny()
    config.learner.algorithm = "gigpo"
    spec = registry.spec("bfcl")
    monkeypatch.setitem(registry._SPECS, "bfcl", dataclasses.replace(spec, make=NoStateEnv))
    with pytest.raises(ValueError, match=r"config.learner.advantage='gigpo': environment 'bfcl' "
                                         r"\(NoStateEnv\) has no state_view"):
        build_plan(config)
    config.learner.algorithm = "grpo"
    assert build_plan(config).learner.advantage == "grpo"


def test_multi_agent_runs_do_not_branch():
    config = load_config_file(ROOT / "configs" / "qa_multi_agent.py")
    build_plan(config)
    config.rollout.branch.points = "every_call"
    with pytest.raises(ValueError, match=r"config.multi_agent.enabled=True: with config.rollout."
                                         r"branch.points='every_call': teams do not branch"):
        build_plan(config)
