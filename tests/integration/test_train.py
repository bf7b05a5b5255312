"""The training run end to end (launch/train.py on the embedded model): it learns, it resumes
exactly, it runs as two processes, and it refuses bad configs before loading anything."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

from seetjax.config.sections import load_config_file
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rl.config import build_plan
from seetjax.rl.restore import restore_run
from seetjax.rl.trainer import TrainRun

ROOT = Path(__file__).resolve().parents[2]
# The main job as configs/smoke.py cuts it (SFT warm-up from the embedded default on two generated
# tasks), with enough warm-up to learn them and one RL step per SEET stage.
MAIN_JOB = ["--config=configs/smoke.py", "--config.eval.per_category=2",
            "--config.eval.splits=train", "--config.sft.run.train.steps=30",
            "--config.sft.run.train.checkpoint_every=30", "--config.sft.run.data.batch_size=1",
            "--config.train.steps=4", "--config.train.checkpoint_every=2"]
# configs/tiny.py (BFCL) without its warm-up: RL only on two base tasks, short episodes, one step
# per SEET stage (fast, for resume, budget and multi-process checks).
RL_ONLY = ["--config=configs/tiny.py", "--config.sft.enabled=false",
           "--config.data.categories=base", "--config.data.tasks_per_category=2",
           "--config.eval.splits=", "--config.train.steps=4", "--config.seet.stage1.steps=1",
           "--config.seet.stage2.steps=1", "--config.seet.stage3.steps=1",
           "--config.train.checkpoint_every=2", "--config.limits.max_episode_tokens=768",
           "--config.limits.max_reply_tokens=16", "--config.limits.max_turn_tokens=32"]


def launch(workdir, flags, env=None, extra=()):
    env = env or {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
    out = subprocess.run([sys.executable, "launch/train.py", f"--workdir={workdir}", *flags,
                          *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def params(workdir):
    return safetensors.numpy.load_file(Path(workdir) / "model" / "model.safetensors")


@pytest.mark.slow
def test_short_main_job_learns_and_writes_everything(tmp_path, embedded_dir):
    # a relative workdir, as `make demo` gives; held-out evaluations at the SEET stages' ends
    launch(os.path.relpath(tmp_path, ROOT), MAIN_JOB,
           extra=["--config.train.eval_at_stage_ends=true", "--config.train.eval_held_out=true"])
    evals = json.loads((tmp_path / "summary.json").read_text())["evals"]
    assert list(evals) == ["untrained", "after_sft", "after_rl"]
    initial, final = evals["untrained"]["tasks"], evals["after_rl"]["tasks"]
    assert final["format_validity"] > initial["format_validity"] + 0.3
    assert final["checked_turn_accuracy"] > initial["checked_turn_accuracy"]
    assert evals["after_sft"]["tasks"] != initial  # the warm-up is evaluated on its own
    assert all(list(e["splits"]) == ["train", "train (official)"] for e in evals.values())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sorted({r["stage"] for r in rows if "stage" in r}) == [1.0, 2.0, 3.0, 4.0]
    for r in rows:  # counterfactual records available vs trained (seet.max_pairs = 2)
        if "stage" in r:
            assert r["rollout/records_trained"] == min(r["rollout/records_available"], 2)
    start = rows[0]  # the curves start from the untrained model and from the start of RL
    assert start["step"] == 0 and start["eval/untrained_format_validity"] == 0.0
    assert start["eval/train_format_validity"] == evals["after_sft"]["tasks"]["format_validity"]
    for name in ("curves.png", "report.md", "model/config.json", "sft/model/config.json",
                 "evals/untrained.json", "evals/after_sft.json", "evals/after_rl.json"):
        assert (tmp_path / name).exists(), name
    # stages 1-3 end after steps 1-3 (one step each); stage 4 lasts to the end, after_rl's
    assert sorted(p.name for p in (tmp_path / "evals").glob("step_*.json")) == [
        "step_1.json", "step_2.json", "step_3.json"]
    for r in rows:  # the RL steps' rows (the final evaluation has a row of its own)
        if "stage" in r:
            ended = r["step"] in (1, 2, 3)
            assert ("eval/bfcl_train_overall" in r) == ("time/eval_s" in r) == ended, r["step"]
    step_2 = json.loads((tmp_path / "evals" / "step_2.json").read_text())
    assert [r["eval/bfcl_train_overall"] for r in rows if r["step"] == 2] == [
        step_2["splits"]["train"]["overall"]]
    report = (tmp_path / "report.md").read_text()
    for row in ("| untrained | 0.000 |", "| after SFT (start of RL) |", "| after RL |",
                "| after RL step 1 |", "| after RL step 3 |",
                "| gain of SFT |", "| gain of RL |", "| train |", "| learner update |",
                "| sampling (prefill, decode, host transfers) |"):
        assert row in report, row
    for r in rows:  # every RL step's time, part by part
        if "stage" in r:
            assert r["time/rollout_s"] >= r["time/rollout_sampling_s"] > 0
            assert r["time/learn_s"] > 0 and 0 <= r["time/rollout_idle_share"] < 1


@pytest.mark.slow
def test_a_resumed_run_ends_where_a_straight_one_does(tmp_path, embedded_dir):
    # with an evaluation after each stage's step (1-3): evaluating takes nothing from training
    flags = [*RL_ONLY, "--config.train.eval_at_stage_ends=true"]
    launch(tmp_path / "straight", flags)
    launch(tmp_path / "stopped", flags, extra=["--config.train.steps=2"])
    stdout = launch(tmp_path / "stopped", flags).stdout
    straight, resumed = params(tmp_path / "straight"), params(tmp_path / "stopped")
    for name, value in straight.items():
        np.testing.assert_array_equal(value, resumed[name], err_msg=name)
    rows = [json.loads(line) for line in
            (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows]
    assert steps.count(3) == 1 and steps.count(4) >= 1  # steps after the checkpoint, once each
    evaluated = [r["step"] for r in rows if "stage" in r and "eval/train_reward" in r]
    assert evaluated == [1, 2, 3]
    assert "resumed at step 2" in stdout
    # the last checkpoint is the exported model; an earlier one is not
    model, _, plan = restore_run(tmp_path / "straight")
    exported = load_hf_checkpoint(tmp_path / "straight" / "model")
    for (key, a), (_, b) in zip(nnx.to_flat_state(nnx.state(model)),
                                nnx.to_flat_state(nnx.state(exported))):
        np.testing.assert_array_equal(a.get_value(), b.get_value(), err_msg=str(key))
    earlier, _, _ = restore_run(tmp_path / "straight", step=2)  # any kept checkpoint restores
    assert earlier.config == model.config and plan.stages[0].stage == 1


@pytest.mark.slow
def test_a_token_budget_ends_the_rl_phase_and_resumes_with_its_count(tmp_path, embedded_dir):
    def rl_rows():
        rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
        return [r for r in rows if "rollout/policy_tokens" in r]

    # any step samples a token: a budget of 1 ends the RL phase after step 1 of 4, checkpointed
    launch(tmp_path, RL_ONLY, extra=["--config.train.checkpoint_every=4",
                                     "--config.train.max_policy_tokens=1"])
    first = rl_rows()
    assert [r["step"] for r in first] == [1] and first[0]["rollout/policy_tokens"] > 0
    assert first[0]["rollout/cumulative_policy_tokens"] == first[0]["rollout/policy_tokens"]
    assert (tmp_path / "checkpoints" / "1").exists() and (tmp_path / "model").exists()
    # a larger budget resumes at step 1 with the count restored, and stops after step 2
    budget = int(first[0]["rollout/cumulative_policy_tokens"]) + 1
    stdout = launch(tmp_path, RL_ONLY, extra=["--config.train.checkpoint_every=4",
                                              f"--config.train.max_policy_tokens={budget}"]).stdout
    assert "resumed at step 1" in stdout
    rows = rl_rows()
    assert [r["step"] for r in rows] == [1, 2] and rows[0] == first[0]
    assert rows[1]["rollout/cumulative_policy_tokens"] == (
        first[0]["rollout/policy_tokens"] + rows[1]["rollout/policy_tokens"])
    assert "2 RL steps" in (tmp_path / "report.md").read_text()
    for r in rows:  # synchronous RL: each step trains on the newest weights' tokens only
        assert (r["rollout/versions"], r["rollout/newest_version_share"],
                r["rollout/staleness"]) == (1.0, 1.0, 0.0)
    updated = "learner/no_signal" not in first[0]  # the version counts the learner's updates
    assert [r["rollout/oldest_version"] for r in rows] == [0.0, float(updated)]
    # without periodic evaluations the RL steps' rows carry none, and no step files are kept
    assert not any(k.startswith("eval/") for r in rows for k in r)
    assert not list((tmp_path / "evals").glob("step_*.json"))


def test_loading_a_config_starts_no_jax_backend():
    # launch/train.py --multihost parses --config before jax.distributed.initialize, which fails
    # once any JAX computation has started the CPU client (importing bm25s did, through the SFT
    # data modules a config file loads)
    code = ("import jax._src.xla_bridge as xb; from seetjax.config.sections import load_config_file;"
            " load_config_file('configs/tiny.py'); print(sorted(xb._backends))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


@pytest.mark.slow
def test_two_processes_on_localhost(tmp_path, embedded_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = []
    for i in range(2):
        proc_env = dict(env, SEETJAX_COORDINATOR=f"127.0.0.1:{port}", SEETJAX_NUM_PROCESSES="2",
                        SEETJAX_PROCESS_ID=str(i))
        procs.append(subprocess.Popen(
            [sys.executable, "launch/train.py", f"--workdir={tmp_path}", "--multihost",
             *RL_ONLY, "--config.train.steps=2"], cwd=ROOT, env=proc_env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate(timeout=1200)
        assert proc.returncode == 0, err[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "stage" in r] == [1, 2]
    assert (tmp_path / "model" / "model.safetensors").exists()


def test_eval_splits_may_name_their_own_count():
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.eval.per_category = 3
    config.eval.splits = "train, test@5,bfcl:test@0"
    assert build_plan(config).eval_splits == {"train": 3, "test": 5, "bfcl:test": 0}


@pytest.mark.parametrize("override,message", [
    (("seet", "stage2", "retry_budget", -1), "config.seet.stage2"),
    (("rollout", "group_size", 1), "config.rollout.group_size"),
    (("data", "split", "dev"), "config.data.split"),
    (("data", "source", "hub"), "config.data.source: TaskSource.kind='hub': one of"),
    (("data", "generated", "min_turns", 0), "config.data.generated: Difficulty.turns="),
    (("data", "generated", "api_classes", "Nope"), r"config.data.generated: TaskSource.classes=\('Nope',\): "
     "a non-empty subset"),
    (("eval", "splits", "train,bfcl:dev"), "config.eval.splits: 'bfcl:dev'"),
    (("eval", "splits", "train,test@x"), "config.eval.splits='train,test@x': 'test@x': a split's own count"),
    (("eval", "splits", "test,test@4"), "config.eval.splits='test,test@4': 'test' appears twice"),
    (("eval", "splits", "test@-4"), "config.eval.splits='test@-4': 'test@-4'"),
    (("learner", "algorithm", "ppo2"), "config.learner"),
    (("env", "prompt_style", "xml"), "config.env"),
    (("sampling", "top_p", 1.5), "config.sampling"),
    (("model", "remat", "some"), "config.model: ModelConfig.remat"),
    (("model", "attention_block", -2), "config.model: ModelConfig.attention_block"),
    (("model", "attention_impl", "flash"), "config.model: ModelConfig.attention_impl"),
    (("limits", "max_reply_tokens", -5), "config.limits: EpisodeLimits.max_reply_tokens"),
    (("limits", "max_episode_tokens", 60), "config.limits: EpisodeLimits.max_episode_tokens"),
    (("data", "tasks_per_category", -1), "config.data.tasks_per_category"),
    (("eval", "per_category", -1), "config.eval.per_category"),
    (("eval", "decodings", "lenient,strict"), "config.eval.decodings: BfclEnvConfig.decoding='strict': "
     "one of"),
    (("eval", "decodings", "official,official"), "config.eval.decodings='official,official'"),
    (("env", "prompt_style", "native"), "config.eval.decodings: BfclEnvConfig.decoding='official': reads"),
    (("train", "checkpoint_every", 0), "config.train.checkpoint_every"),
    (("train", "keep_checkpoints", 0), "config.train.keep_checkpoints"),
    (("train", "max_policy_tokens", -1), "config.train.max_policy_tokens=-1: must be an integer"),
    (("train", "eval_at_stage_ends", None), "config.train.eval_at_stage_ends=None: must be True"),
    (("train", "eval_held_out", True), "config.train.eval_held_out=True: no periodic evaluation"),
])
def test_bad_configs_fail_with_the_field_named(override, message):
    config = load_config_file(ROOT / "configs" / "tiny.py")
    *path, key, value = override
    section = config
    for name in path:
        section = section[name]
    section[key] = value
    with pytest.raises(ValueError, match=message):
        build_plan(config)


def test_held_out_periodic_evaluations_need_splits():
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.train.eval_at_stage_ends = config.train.eval_held_out = True
    build_plan(config)
    config.eval.splits = ""
    with pytest.raises(ValueError, match="config.eval.splits names no split"):
        build_plan(config)


@pytest.mark.parametrize("name", ["testbed", "tiny", "grpo", "ppo", "dpo", "sft", "smoke",
                                  "qwen2_5_7b_seet", "qwen2_5_1_5b_seet"])
def test_shipped_configs_are_valid(name):
    config = load_config_file(ROOT / "configs" / f"{name}.py")
    if name == "sft":
        from seetjax.sft.config import validate
        validate(config)
    else:
        if name.startswith("qwen"):
            config.model.path = "/models/Qwen2.5-Instruct"  # required; not read by validation
        build_plan(config)


def test_prompts_longer_than_the_episode_fail_before_any_work(tmp_path, embedded_dir):
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.limits.max_episode_tokens = 200  # over max_reply_tokens + 2, under the ~500-token prompts
    with pytest.raises(ValueError, match="config.limits.max_episode_tokens=200: the opening "
                                         "prompt of task .* alone has"):
        TrainRun(config, tmp_path).run()
    assert not (tmp_path / "evals").exists()  # nothing was evaluated or trained
