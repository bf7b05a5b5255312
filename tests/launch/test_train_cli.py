"""`launch/train.py`'s refusals, before anything trains: every bad value named with its field
(non-finite numbers included), an empty --workdir, a model whose weights are not finite, and a
workdir another run holds."""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy

from seetjax.config.sections import load_config_file
from seetjax.models.hf import load_hf_checkpoint, save_hf_checkpoint
from seetjax.rl.config import build_plan
from seetjax.rl.trainer import TrainRun
from seetjax.runtime.workdir import WorkdirBusy, WorkdirLock
from tests.configlib import ROOT, config_with
from tests.launch.flagcheck import assert_flag_errors


def tiny_with(path: str, value):
    return config_with("tiny", {path: value})


@pytest.mark.parametrize("path,value", [
    ("sampling.temperature", math.inf), ("learner.optimizer.learning_rate", math.nan),
    ("learner.counterfactual_weight", math.nan), ("learner.optimizer.max_grad_norm", math.inf),
    ("learner.lora.alpha", -math.inf), ("multi_agent.sub_answer_weight", math.inf),
    ("seet.stage1.threshold", math.nan), ("sft.run.learner.optimizer.learning_rate", math.inf),
    ("reward.shaping.turn_penalty_floor", math.nan)])
def test_non_finite_numbers_are_refused_naming_the_field(path, value):
    # sampling.temperature is linked to learner.temperature: either may be named first
    named = r"\w+\.temperature" if path.endswith("temperature") else path.replace(".", r"\.")
    with pytest.raises(ValueError, match=rf"config\.{named}={value!r}: must be a finite number"):
        build_plan(tiny_with(path, value))


def test_an_infinity_that_means_something_is_kept():
    build_plan(tiny_with("reward.shaping.turn_penalty_floor", -math.inf))  # -inf: no floor


@pytest.mark.parametrize("path,value,message", [
    ("data.generated.min_turns", 0, r"Difficulty.turns=\(0, 4\): .*min_turns"),
    ("data.generated.max_turns", 0, r"Difficulty.turns=\(1, 0\): .*max_turns"),
    ("data.generated.actions_per_turn", 0, "Difficulty.actions_per_turn=0"),
    ("data.generated.calls_per_turn", -1, "Difficulty.calls_per_turn=-1"),
    ("data.generated.classes", 0, "Difficulty.classes=0"),
    ("data.generated.state_size", 0, "Difficulty.state_size=0"),
    ("env.max_steps_per_turn", 0, "BfclEnvConfig.max_steps_per_turn=0"),
    ("learner.counterfactual_weight", -1.0, "learner.counterfactual_weight=-1.0"),
    ("sft.run.data.single_turn.retrieval_k", 0, "data.single_turn: single_turn.retrieval_k=0"),
    ("seet.stage2.steps", 0, "config.seet.stage2.steps=0"),
])
def test_values_once_refused_without_their_field_name_it(path, value, message):
    config = tiny_with(path, value)
    if path.startswith("data.generated"):
        config.data.source = "generated"
    if "single_turn" in path:
        config.sft.enabled = True
        config.sft.run.data.single_turn.retrieval = 1
    with pytest.raises(ValueError, match=message):
        build_plan(config)


def test_an_empty_workdir_is_refused(tmp_path, monkeypatch):
    assert_flag_errors("launch/train.py", [(["--workdir="], "--workdir names no directory"),
                                           (["--workdir= "], "--workdir names no directory"),
                                           (["--workdir=runs/x"], "")])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="workdir='': names no directory"):
        TrainRun(load_config_file(ROOT / "configs" / "tiny.py"), "")
    assert not list(tmp_path.iterdir())  # nothing written into the current directory


def test_a_model_whose_weights_are_not_finite_is_refused_at_load(hf_qwen2_dir, tmp_path):
    model_dir = Path(shutil.copytree(hf_qwen2_dir, tmp_path / "model"))
    name = "model.layers.1.mlp.down_proj.weight"
    (file,) = model_dir.glob("*.safetensors")
    tensors = safetensors.numpy.load_file(file)
    tensors[name] = tensors[name].copy()
    tensors[name][3, 5] = np.nan
    safetensors.numpy.save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=f"tensor {name} has 1 non-finite value"):
        load_hf_checkpoint(model_dir)


def test_a_model_whose_weights_are_not_finite_is_never_exported(hf_qwen2_dir, tmp_path):
    model = load_hf_checkpoint(hf_qwen2_dir)
    down = model.layers[1].mlp.down_proj.kernel
    down.set_value(down.get_value().at[5, 3].set(jnp.inf))
    with pytest.raises(ValueError, match="not written: tensor.s. model.layers.1.mlp.down_proj"):
        save_hf_checkpoint(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_second_run_on_a_held_workdir_is_refused(tmp_path):
    held = WorkdirLock(tmp_path)
    try:
        with pytest.raises(WorkdirBusy, match=f"pid {os.getpid()} on host {socket.gethostname()}"):
            TrainRun(load_config_file(ROOT / "configs" / "tiny.py"), tmp_path)
        out = subprocess.run([sys.executable, "launch/train.py", f"--workdir={tmp_path}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        held.release()
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"is in use by another run (pid {os.getpid()} on host" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "config.json").exists()  # the holder's files untouched


def test_the_lock_of_a_run_that_died_is_taken_over(tmp_path, caplog):
    (tmp_path / "run.lock").write_text(json.dumps({"pid": 2**22 + 1, "host": "gone",
                                                   "started": "2026-11-27T00:00:00"}))
    with caplog.at_level("WARNING"):
        lock = WorkdirLock(tmp_path)
    assert f"ended without releasing it (pid {2**22 + 1} on host gone" in caplog.text
    assert json.loads((tmp_path / "run.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert (tmp_path / "run.lock").read_text() == ""
    WorkdirLock(tmp_path).release()  # released: free again, without a warning
