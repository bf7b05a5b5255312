"""`launch/plan.py`: the plan of a shipped config for a mesh larger than this machine's, and its
refusal of an 80 GiB device, with the changes that fit; bad flags named."""

import subprocess
import sys

import pytest

from seetjax.models.hf import load_hf_checkpoint
from tests.launch.flagcheck import ROOT, assert_flag_errors


def test_a_shipped_config_is_planned_for_8_devices_and_refused_with_its_changes():
    out = subprocess.run(
        [sys.executable, "launch/plan.py", "--config=configs/qwen2_5_1_5b_seet.py",
         "--preset=qwen2.5-1.5b", "--mesh=data=1,fsdp=8,tensor=1", "--device_memory=80GiB"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "1.54B parameters, bfloat16 weights" in out.stdout
    # 1,024 rows / 8 devices x 16,384 slots x 28 layers x K and V x 2 KV heads x 128 x 2 bytes
    assert "| KV cache | 56.00 | sampling |" in out.stdout
    # f32 masters of 1.54B parameters over 8 devices
    assert "| parameters, f32 masters (trained) | 0.72 | both |" in out.stdout
    assert "Traceback" not in out.stderr
    assert "plan.py: memory plan: the sampling phase needs" in out.stderr
    assert "more than the 80.0 GiB budget" in out.stderr
    assert "learner.mesh.fsdp=16 (16 devices):" in out.stderr
    assert "data.tasks_per_step=32:" in out.stderr


def test_bad_flags_are_named():
    assert_flag_errors("launch/plan.py", [
        (["--mesh=data=1,fsdp=8,pipe=2"], "--mesh: data=D,fsdp=F,tensor=T"),
        (["--device_memory=lots"], "--device_memory: a size such as 80GiB"),
        (["--devices=0"], "--devices must be >= 1"),
        (["--mesh=fsdp=-1", "--devices=16", "--device_memory=80GB"], ""),
    ])
    assert_flag_errors("launch/train.py", [
        (["--device_memory=80 gigs"], "--device_memory: a size such as 80GiB"),
        (["--device_memory=40GiB"], ""),
    ])


@pytest.mark.parametrize("config", ["tiny.py", "testbed.py"])
def test_a_config_on_the_embedded_models_is_planned_with_their_shape(embedded_dir, config):
    # model.path '' (the embedded default) or "embedded:base" (its SFT, the same shape): the
    # default's config.json gives the shape, without building the base
    out = subprocess.run([sys.executable, "launch/plan.py", f"--config=configs/{config}",
                          "--device_memory=24GiB"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    params = load_hf_checkpoint(embedded_dir).config.num_params()
    assert f"model: {params / 1e9:.2f}B parameters, float32 weights" in out.stdout
    assert "fits: peak" in out.stdout
