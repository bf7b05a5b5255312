"""An SFT run end to end (launch/sft.py on the embedded model and BFCL dialogs): two continual
stages with coreset selection and replay, then a resume from mid-stage that repeats the last
steps exactly."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--config=configs/sft.py", "--config.train.steps=4", "--config.train.log_every=1",
         "--config.train.checkpoint_every=2", "--config.train.eval_every=0",
         "--config.data.split=validation", "--config.data.stages=base;miss_param",
         "--config.data.seq_len=1024", "--config.data.max_len=1024",
         "--config.data.batch_size=2", "--config.replay.capacity=4", "--config.replay.ratio=0.5",
         "--config.coreset.strategy=hybrid", "--config.coreset.fraction=0.5"]


def launch(workdir):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
    out = subprocess.run([sys.executable, "launch/sft.py", f"--workdir={workdir}", *FLAGS],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def metrics(workdir):
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sft_run_with_stages_coreset_replay_and_exact_resume(tmp_path, embedded_dir):
    stdout = launch(tmp_path)
    assert "stage 0 coreset (hybrid): kept 2 of 4 examples" in stdout
    steps = [m for m in metrics(tmp_path) if "loss" in m]
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert all(m["data/replayed"] == 0 for m in steps[:4])  # stage 0: nothing to replay yet
    assert sum(m["data/replayed"] for m in steps[4:]) / 4 == pytest.approx(0.5, abs=0.15)
    report = json.loads((tmp_path / "data_report.json").read_text())
    assert report["stage 1"]["pipeline"]["replay_examples"] == 2
    assert report["stage 0"]["coreset"]["after"]["examples"] == 2
    assert len(report["stage 0"]["left_out"]) == 6  # long dialogs, each with its reason
    assert (tmp_path / "model" / "config.json").exists()

    # Lose the last checkpoint: the run resumes at stage 1, step 2 and must redo steps 7-8
    # exactly (same batches from the restored iterator, coreset and replay memory).
    shutil.rmtree(tmp_path / "checkpoints" / "8")
    assert "resumed from step 6: stage 1, step 2 of it" in launch(tmp_path)
    redone = [m for m in metrics(tmp_path) if "loss" in m][8:]
    assert [m["step"] for m in redone] == [7, 8]
    for before, after in zip(steps[6:], redone):
        for key in ("loss", "grad_norm", "tokens", "data/replayed", "data/fill"):
            assert after[key] == before[key], key
