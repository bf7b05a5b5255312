"""configs/scale_1_5b.py at its CPU size (`:tiny`, the `tiny-qwen2` preset with random weights)
through launch/train.py: the per-step figures it reports, and compile counts that stop growing
once every shape bucket has been met (docs/scale.md, "The RL loop at scale")."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 5  # SEET stages 1, 2, 3, 4, 4: every kind of rollout, then one more step of the last


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The run's workdir and its RL steps' metrics rows."""
    workdir = tmp_path_factory.mktemp("scale")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
    out = subprocess.run(
        [sys.executable, "launch/train.py", "--config=configs/scale_1_5b.py:tiny",
         f"--workdir={workdir}", f"--config.train.steps={STEPS}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return workdir, [r for r in rows if "stage" in r]


@pytest.mark.slow
def test_every_step_reports_its_figures(run):
    workdir, steps = run
    assert [r["stage"] for r in steps] == [1.0, 2.0, 3.0, 4.0, 4.0]
    for r in steps:
        assert r["time/rollout_s"] >= r["time/rollout_sampling_s"] > 0
        assert r["time/rollout_environment_s"] > 0 and r["time/rollout_slow_loop_s"] >= 0
        assert 0 <= r["time/rollout_idle_share"] < 1 and r["time/learn_s"] > 0
        # one process: the replies' tokens over the policy calls' time
        assert r["time/rollout_tokens_per_s"] == pytest.approx(
            r["rollout/policy_tokens"] / r["time/rollout_sampling_s"])
        assert r["learner/tokens_per_s"] > 0
        assert "learner/mfu" not in r and "device/peak_memory_gib" not in r  # the CPU: unknown
    model = json.loads((workdir / "model" / "config.json").read_text())
    assert (model["vocab_size"], model["hidden_size"]) == (8192, 256)  # the preset, trained
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == ["5"]
    report = (workdir / "report.md").read_text()
    assert "| rollout tokens/s | update tokens/s | update MFU |" in report
    assert "n/a (no memory figures from the backend: the CPU)" in report


@pytest.mark.slow
def test_compile_counts_stop_growing_once_every_bucket_is_met(run):
    _, steps = run
    learner = [r["compile/learner"] for r in steps]
    sampler = [r["compile/sampler"] for r in steps]
    # One update program: rows (tasks x samples, rounded to the micro-batches), the row width
    # (limits), the pairs (padded to seet.max_pairs) and the packed rows' count are fixed here.
    assert learner == [1.0] * STEPS, learner
    # The sampler's programs are prefill (rows, chunk, cache slots) and decode (rows, slots,
    # steps, temperature) buckets, all powers of two: stage 1 meets the greedy evaluation's and
    # the first rollout's, stage 2 (interception, retries) the rest; later steps add none.
    assert sampler[1] > sampler[0] and sampler[1:] == [sampler[1]] * (STEPS - 1), sampler
