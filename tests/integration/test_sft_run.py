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


@pytest.mark.slow
def test_a_lora_sft_run_exports_a_model_transformers_loads(tmp_path, embedded_dir):
    """LoRA from the run config (`learner.lora.*`): the run trains adapters only and its final
    export has them merged, as a directory transformers loads with our model's logits."""
    import numpy as np
    import safetensors.numpy
    import torch
    import transformers

    from seetjax.models.hf import load_hf_checkpoint

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    flags = ["--config=configs/sft.py", "--config.train.steps=2", "--config.train.log_every=1",
             "--config.train.checkpoint_every=2", "--config.train.eval_every=0",
             "--config.data.split=validation", "--config.data.categories=base",
             "--config.data.seq_len=1024", "--config.data.max_len=1024",
             "--config.data.batch_size=2", "--config.data.eval_split=",
             "--config.learner.lora.rank=4", "--config.learner.lora.targets=q_proj,v_proj",
             "--config.learner.optimizer.learning_rate=0.05"]
    out = subprocess.run([sys.executable, "launch/sft.py", f"--workdir={tmp_path}", *flags],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    exported = tmp_path / "model"
    ours = load_hf_checkpoint(exported)
    base = load_hf_checkpoint(embedded_dir)
    tokens = np.arange(1, 17)[None]
    ids, positions, mask = (tokens, np.arange(16)[None], np.ones((1, 16), np.int32))
    our_logits = np.asarray(ours(ids, positions, mask)[0])
    assert np.abs(our_logits - np.asarray(base(ids, positions, mask)[0])).max() > 1e-3  # trained
    hf = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(ids)).logits.float().numpy()
    assert np.abs(theirs - our_logits).max() <= 1e-3
    merged = safetensors.numpy.load_file(exported / "model.safetensors")
    assert merged and not any("lora" in n for n in merged)  # a plain model: adapters merged

    # workdir/adapter: the adapters alone in PEFT's layout; base + adapter = the merged export.
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 16)
    assert config["target_modules"] == ["q_proj", "v_proj"]
    adapter = safetensors.numpy.load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    base_weights = safetensors.numpy.load_file(Path(embedded_dir) / "model.safetensors")
    modules = {n.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for n in adapter}
    assert modules and {m.rsplit(".", 1)[1] for m in modules} == {"q_proj", "v_proj"}
    for module in modules:  # PEFT's merge: W + (lora_alpha / r) B A
        a = adapter[f"base_model.model.{module}.lora_A.weight"]
        b = adapter[f"base_model.model.{module}.lora_B.weight"]
        np.testing.assert_allclose(base_weights[f"{module}.weight"] + 4.0 * (b @ a),
                                   merged[f"{module}.weight"], atol=1e-5)


@pytest.mark.parametrize("field,value,message", [
    ("rank", -1, "LoRAConfig.rank"), ("alpha", 0.0, "LoRAConfig.alpha"),
    ("dropout", 0.05, "LoRAConfig.dropout=0.05: LoRA dropout is not implemented"),
    ("dropout", 1.5, r"LoRAConfig.dropout=1.5: must be in \[0, 1\)"),
    ("targets", "q_proj,attn", "LoRAConfig.targets")])
def test_bad_lora_fields_are_named(field, value, message):
    from seetjax.config.sections import load_config_file
    from seetjax.sft.config import validate

    config = load_config_file(ROOT / "configs" / "sft.py")
    config.learner.lora.rank = 4
    config.learner.lora[field] = value
    with pytest.raises(ValueError, match=message):
        validate(config)
