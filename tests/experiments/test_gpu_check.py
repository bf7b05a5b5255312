"""experiments/benchmarks/gpu_check.py (`make gpu-check`): a hung part is killed at its cap with
its children, the figures are read from pytest's and the trainer's output, and the dry run writes
its rows and copies its files out. The GPU parts themselves run only on a GPU."""

import json
import os
import subprocess
import sys
import time

import pytest


@pytest.fixture(scope="module")
def check(experiment):
    return experiment("benchmarks/gpu_check.py")


def test_a_hung_part_is_killed_with_its_children_at_its_cap(check, tmp_path):
    pidfile = tmp_path / "child.pid"
    command = [sys.executable, "-c", "import subprocess, sys, time; p = subprocess.Popen(['sleep', "
               f"'60']); open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)"]
    start = time.monotonic()
    assert check.run(command, tmp_path / "part.log", dict(os.environ), 2) == "timed out after 2 s"
    assert time.monotonic() - start < 10
    stat = f"/proc/{int(pidfile.read_text())}/stat"
    time.sleep(0.2)  # the grandchild went with the group (a zombie until init reaps it)
    assert not os.path.exists(stat) or open(stat).read().split(") ")[1][0] == "Z"
    assert check.run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "b.log",
                     dict(os.environ), 10) == "failed (rc 3)"


def test_parts_and_groups(check):
    assert check.expand_parts("figures") == ["wheels", "scale"]
    assert check.expand_parts("checks,wheels") == ["wheels", "plan", "learner", "shared", "tests"]
    assert check.expand_parts("sampler,tests") == ["sampler", "tests"]  # a part, not a group
    assert check.expand_parts("decode,sampler") == ["wheels", "anatomy", "sampler", "profile",
                                                    "cublas"]
    assert check.expand_parts("tests")[-1] == "tests"  # the budget cuts the last part first
    assert check.expand_parts("all") == list(check.CAPS)
    with pytest.raises(ValueError, match="unknown \\['tests-gpu'\\]"):
        check.expand_parts("sampler,tests-gpu")


def test_figures_from_pytest_and_the_scaled_run(check, tmp_path):
    log = ("PASSED tests/models/test_transformer.py::test_cudnn_attention_matches_xla_with_"
           "gradients\nFAILED tests/learner/test_step.py::test_x - AssertionError\n"
           "==== 1 failed, 40 passed, 2 skipped in 61.20s (0:01:01) ====\n")
    assert check.pytest_figures(log) == ("1 failed, 40 passed, 2 skipped in 61.20s; cuDNN test "
                                         "PASSED; FAILED tests/learner/test_step.py::test_x")
    assert check.pytest_figures("..\n28 passed in 5.01s\n") == "28 passed in 5.01s"
    cut_off = "[gw0] [ 10%] PASSED tests/a.py::x \n[gw1] [ 20%] FAILED tests/b.py::y \n"
    assert check.pytest_figures(cut_off) == ("no summary; so far 1 passed, 1 failed, 0 skipped; "
                                             "FAILED tests/b.py::y")
    (tmp_path / "scale").mkdir()
    rows = [{"step": 0, "eval/reward": 0.0},
            {"step": 1, "time/rollout_s": 30.0, "time/batch_s": 0.5, "time/learn_s": 9.5,
             "learner/loss": 1.0},
            {"step": 2, "time/rollout_s": 6.0, "time/batch_s": 0.5, "time/learn_s": 1.5,
             "time/rollout_idle_share": 0.125, "learner/mfu": 0.4}]
    (tmp_path / "scale" / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)))
    assert check.scale_figures(tmp_path) == (
        "2 RL steps (40.0, 8.0 s of rollout + batch + update each, the first compiling); step 2: "
        "learner/mfu 0.4, time/batch_s 0.5, time/learn_s 1.5, time/rollout_idle_share 0.125, "
        "time/rollout_s 6")


def test_anatomy_figures_are_its_headline_even_when_cut_off(check, tmp_path):
    log = tmp_path / "anatomy.log"
    log.write_text("cut off at the cap\n")
    assert check.figures("anatomy", log, tmp_path) == "cut off at the cap"  # no JSON yet
    (tmp_path / "anatomy.json").write_text(json.dumps({"headline": "decode step 3.1 ms"}))
    assert check.figures("anatomy", log, tmp_path) == "decode step 3.1 ms"


def test_plan_figures_are_its_headline_and_its_json_goes_into_the_summary(check, tmp_path):
    log = tmp_path / "plan.log"
    log.write_text("compiling the update\n")
    assert check.figures("plan", log, tmp_path) == "compiling the update"  # cut off: no JSON
    assert check.part_data("plan", tmp_path) == {}
    result = {"headline": "update temp 30.10 GiB vs planned 22.58 (gradients+activations)",
              "programs": {"update": {"temp_over_planned": 1.333}}}
    (tmp_path / "plan.json").write_text(json.dumps(result))
    assert check.figures("plan", log, tmp_path) == result["headline"]
    assert check.part_data("plan", tmp_path) == {"data": result}
    assert check.part_data("anatomy", tmp_path) == {}  # its JSON is a file of its own in $OUT
    command, setting = check.part_commands(True, tmp_path)["plan"]
    assert "--config=configs/scale_1_5b.py:tiny" in command and "$TMP/plan.json" in setting


def test_copy_out_brings_back_at_most_eight_files_the_anatomy_among_them(check, tmp_path,
                                                                         monkeypatch):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "scale").mkdir(parents=True)
    out.mkdir()
    for name in [*check.CAPS, "scale/metrics"]:
        (work / f"{name}.log").write_text("log")
        (work / f"{name}.json").write_text("{}")
    (work / "scale" / "metrics.jsonl").write_text("{}")
    (work / "gpu_check.json").write_text("{}")
    (work / "BENCHMARKS.md").write_text("# Benchmarks")
    monkeypatch.setenv("OUT", str(out))
    check.copy_out(work, work / "BENCHMARKS.md")
    copied = sorted(p.name for p in out.iterdir())
    assert len(copied) <= 8 and "anatomy.json" in copied and "gpu_check.json" in copied, copied


@pytest.mark.slow
def test_dry_run_writes_a_row_per_part_and_copies_the_files_out(tmp_path):
    """The sampler part at tiny shapes on the CPU, end to end (~30 s), and a part out of budget."""
    out, table = tmp_path / "out", tmp_path / "BENCHMARKS.md"
    out.mkdir()
    script = os.path.join(os.path.dirname(__file__), "../../experiments/benchmarks/gpu_check.py")
    proc = subprocess.run([sys.executable, script, "--cpu-dry-run", "--parts",
                           "wheels,sampler", "--benchmarks", str(table)],
                          env=dict(os.environ, OUT=str(out)), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in table.read_text().splitlines() if line.startswith("| 20")]
    assert len(rows) == 1 and "| sampler |" in rows[0] and "of the bound" in rows[0], rows
    assert "| cpu |" in rows[0] and "| ok, " in rows[0]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["dry_run"] and summary["parts"]["wheels"]["status"].startswith("skipped")
    assert summary["parts"]["sampler"]["status"] == "ok"
    assert sorted(p.name for p in out.iterdir()) == ["BENCHMARKS.md", "gpu_check.json",
                                                     "sampler.log"]


def test_the_decode_variants_are_the_sampler_bench_under_their_xla_flags(check, tmp_path):
    commands = check.part_commands(False, tmp_path)
    sampler, _ = commands["sampler"]
    for name, flags in check.XLA_VARIANTS.items():
        command, setting = commands[name]
        assert command == [str(tmp_path / f"{name}.json") if a.endswith("sampler.json") else a
                           for a in sampler]
        assert setting.startswith(f"XLA_FLAGS={flags} ") and f"$TMP/{name}.json" in setting


def test_the_engine_part_needs_the_carried_model_and_reports_the_compare_line(check, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(check, "GPU_MODEL", tmp_path / "model")
    assert "make gpu-model" in check.skip_reason("engine", False, 400, 420)
    assert check.skip_reason("engine", True, 400, 420) is None  # the dry run builds its own
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert check.skip_reason("engine", False, 400, 420) is None
    command, setting = check.part_commands(False, tmp_path)["engine"]
    assert command[-6:] == ["--tasks", "8", "--rounds", "3", "--warmup", "2"]
    # 8 tasks x (2 warm-up + 3 timed batches): the testbed has them (tiny.py's 32 do not)
    assert "--config configs/testbed.py" in setting
    assert f"--model {tmp_path / 'model'}" in setting
    log = tmp_path / "engine.log"
    log.write_text("compiling\nepisodes/s: lock step 4.2, engine 5.9 (1.40x); idle 41% / 8%\n"
                   "[bench] recorded\n")
    assert check.figures("engine", log, tmp_path) == ("episodes/s: lock step 4.2, engine 5.9 "
                                                      "(1.40x); idle 41% / 8%")
    assert check.expand_parts("rollouts") == ["wheels", "engine"]
