"""experiments/benchmarks/plan_check.py: the update, prefill and decode programs compiled from
abstract states at the plan's shapes report the plan's figures, within the tolerances of
tests/rl/test_memory_plan.py, at that test's run over configs/scale_1_5b.py:tiny's model, and
name the buffers live at their peaks; a bad --programs is refused before anything compiles."""

import subprocess
import sys

import pytest

from tests.configlib import ROOT
from tests.rl.test_memory_plan import RUN


@pytest.fixture(scope="module")
def check(experiment):
    return experiment("benchmarks/plan_check.py")


def memory_plan_run(check):
    """test_memory_plan's run (8 unpacked rows of 256 tokens in 2 micro-batches, no pairs) on
    the scale config's tiny model (f32, remat full, the KL reference kept)."""
    config = check.load_run("configs/scale_1_5b.py:tiny")
    for path, value in RUN.items():
        section, field = path.split(".")
        config[section][field] = value
    config.seet.max_pairs = 0
    config.learner.mesh = {"data": 1}  # one of the test session's CPU devices
    return config


def test_compiled_figures_match_the_plan(check):
    result = check.run_check(memory_plan_run(check))
    assert result["plan_rows"]["learner_rows_per_micro_batch_per_device"] == 4
    programs = result["programs"]
    assert programs["update"]["shapes"]["episode_rows"] == 8
    assert programs["update"]["shapes"]["row_width"] == 256
    for name, program in programs.items():
        got, want = program["compiled"], program["planned"]
        for field in ("argument", "output", "alias"):  # the state, weights, cache, batch
            assert got[field] == pytest.approx(want[field], rel=0.01), (name, field)
    for name in ("update", "prefill"):  # f32: within 10%, as tests/rl/test_memory_plan.py
        assert programs[name]["compiled"]["temp"] == pytest.approx(
            programs[name]["planned"]["temp"], rel=0.10), name
    update = programs["update"]
    assert update["planned"]["temp"] == (update["planned"]["gradients"]
                                         + update["planned"]["activations"])
    assert update["temp_over_planned"] == pytest.approx(
        update["compiled"]["temp"] / update["planned"]["temp"], abs=1e-3)
    # What is live at each program's peak: the update's largest transient is an f32 block of the
    # LM head's logits (the tiny model's 8,192-token vocabulary), which the plan's ACT_LOGITS
    # term counts; the live set holds at least the program's temp.
    largest = update["peak"]["largest"][0]
    dims = [int(d) for d in largest["shape"].removeprefix("f32[").rstrip("]").split(",")]
    assert largest["shape"].startswith("f32[") and 8192 in dims, largest
    for name, program in programs.items():
        assert program["peak"]["live_bytes"] >= program["compiled"]["temp"], name
    assert result["headline"].startswith("update temp ") and "peak" in result["headline"]
    table = check.table(result)
    assert "| prefill | temp |" in table and "| decode | alias |" in table


def test_unknown_programs_are_refused_before_compiling():
    proc = subprocess.run([sys.executable, str(ROOT / "experiments/benchmarks/plan_check.py"),
                           "--programs", "update,sample"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--programs=update,sample: unknown ['sample']" in proc.stderr
