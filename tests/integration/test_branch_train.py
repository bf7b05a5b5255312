"""A training run with branching rollouts and GiGPO (issue 44): one RL step end to end, its
branch rows counted in the rollout metrics and in the compute-matched policy tokens. The
branches stop at their fork turn's end, so the returns end with their turns (horizon 'turn',
which the plan requires with them): turn branch rows through the learner's GiGPO, end to end
(tests/rollout/test_branching_points.py checks their turn starts and advantages by hand)."""

import json

import pytest

from tests.integration.test_train import ROOT, launch

# configs/testbed.py (the pretrained embedded base on generated tasks, whose replies call tools)
# cut to one RL step of one task, without held-out evaluations, two training tasks evaluated.
BRANCHING = ["--config.data.tasks_per_step=1",
             "--config.data.categories=base", "--config.data.tasks_per_category=2",
             "--config.rollout.group_size=2", "--config.eval.splits=", "--config.train.steps=1",
             "--config.train.checkpoint_every=1", "--config.learner.algorithm=gigpo",
             "--config.rollout.branch.points=every_call", "--config.rollout.branch.k=2",
             "--config.rollout.branch.max_forks=2", "--config.rollout.branch.until=turn"]


@pytest.mark.slow
def test_one_gigpo_step_on_branching_rollouts(tmp_path, embedded_dir):
    config = tmp_path / "turn_horizon.py"  # run configs have no learner.advantage to flag
    config.write_text("from seetjax.config.sections import load_config_file\n"
                      "def get_config():\n"
                      f"    config = load_config_file({str(ROOT / 'configs' / 'testbed.py')!r})\n"
                      "    config.learner.advantage = {'horizon': 'turn'}\n"
                      "    return config\n")
    launch(tmp_path / "run", [f"--config={config}", *BRANCHING])
    tmp_path = tmp_path / "run"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in rows if "rollout/policy_tokens" in r]
    assert step["step"] == 1 and step["rollout/branch_rows"] > 0
    # a branch's own tokens are sampled tokens: in the step's total, which has the originals' too
    assert 0 < step["rollout/branch_policy_tokens"] < step["rollout/policy_tokens"]
    assert step["rollout/cumulative_policy_tokens"] == step["rollout/policy_tokens"]
    assert "learner/loss" in step or "learner/no_signal" in step
