"""configs/qa_multi_agent.py with a parameter set per role (multi_agent.separate_params), end to
end and RL only: it trains, logs and reports per-role learner metrics, exports both models, and a
run killed after a checkpoint resumes to the same two models as a run never stopped."""

import json
import shutil

import numpy as np
import pytest
import safetensors.numpy

from tests.integration.test_qa_multi_agent_train import TEAM
from tests.integration.test_train import ROOT, launch

# configs/qa_multi_agent.py with separate sets and an entropy bonus (the loss section has no
# such field to override): the coordinator's set moves every step although every credit is equal
# (the untrained tiny model answers nothing and delegates nothing, so the worker's has no rows).
CONFIG = f'''from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file("{ROOT}/configs/qa_multi_agent.py")
    config.multi_agent.separate_params = True
    config.learner.loss.entropy_coef = 0.01
    return config
'''
FLAGS = [flag for flag in TEAM if not flag.startswith("--config=")] + [
    "--config.sft.enabled=false", "--config.train.steps=3", "--config.train.checkpoint_every=2"]
MODELS = ("model_coordinator", "model_worker")


def exported(workdir):
    return {m: safetensors.numpy.load_file(workdir / m / "model.safetensors") for m in MODELS}


@pytest.mark.slow
def test_separate_parameter_sets_train_report_and_resume_after_a_kill(tmp_path, embedded_dir):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    (tmp_path / "separate.py").write_text(CONFIG)
    flags = [f"--config={tmp_path / 'separate.py'}", *FLAGS]
    launch(straight, flags)
    rows = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "rollout/reward" in r]
    assert len(rl) == 3
    for r in rl:  # each set's own update
        assert r["learner/coordinator_entropy"] > 0 and r["learner/coordinator_grad_norm"] > 0
        assert "learner/worker_loss" in r or r["learner/worker_no_signal"] == 1.0
        assert "learner/loss" not in r and "learner/no_signal" not in r
    report = (straight / "report.md").read_text()
    assert "## Per role (multi-agent rollouts)" in report and "| updates | loss |" in report
    assert "| coordinator |" in report and "| worker |" in report
    assert not (straight / "model").exists() and all((straight / m).exists() for m in MODELS)
    first = exported(straight)
    assert any(not np.array_equal(v, first["model_worker"][k])
               for k, v in first["model_coordinator"].items())  # two sets, trained apart
    # What a kill during step 3 leaves: the checkpoint of step 2, metrics past it, no export.
    shutil.copytree(straight, killed)
    for leftover in ("checkpoints/3", *MODELS, "summary.json", "report.md"):
        path = killed / leftover
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert "resumed at step 2" in launch(killed, flags).stdout
    resumed = exported(killed)
    for model in MODELS:
        for name, value in first[model].items():
            np.testing.assert_array_equal(value, resumed[model][name], err_msg=f"{model}/{name}")
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text()
             .splitlines()]
    assert steps.count(3) == 2  # step 3 once, and the after-RL evaluation at step 3
