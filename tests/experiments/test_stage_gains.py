"""experiments/stage_gains/stage_gains.py: a run's evaluation points read from its workdir and labelled by
stage, the per-point means and per-stage changes paired by run, and clear errors."""

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def stages(experiment):
    return experiment("stage_gains/stage_gains.py")


def split(overall, turns):
    return {"split": "test", "overall": overall,
            "turn_pass_rate": {"base": turns[0], "miss_func": turns[1]}}


def make_run(path: Path, overall: list[float], steps=(2, 4)) -> Path:
    """A run of stages 1 (steps 1-2), 2 (3-4) and 3 (5-6) evaluated after steps `steps`."""
    (path / "evals").mkdir(parents=True)
    stage = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
    rows = [{"step": 0, "eval/train_reward": 0.0}]
    rows += [{"step": s, "stage": float(stage[s]), "rollout/reward": 0.1} for s in range(1, 7)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = ["after_sft", *(f"step_{s}" for s in steps), "after_rl"]
    for name, value in zip(names, overall, strict=True):
        (path / "evals" / f"{name}.json").write_text(json.dumps(
            {"splits": {"test": split(value, (value, value / 2))}}))
    return path


def test_points_are_labelled_by_the_stage_that_ended(stages, tmp_path):
    run = make_run(tmp_path / "s0", [0.25, 0.5, 0.375, 0.75])
    points = stages.evaluation_points(run, "test")
    assert list(points) == ["start", "stage 1", "stage 2", "end"]
    assert [p["overall"] for p in points.values()] == [0.25, 0.5, 0.375, 0.75]
    # a mid-stage evaluation (step 3, in stage 2) is no stage's end: left out
    mid = make_run(tmp_path / "s1", [0.25, 0.5, 0.0, 0.375, 0.75], steps=(2, 3, 4))
    assert [p["overall"] for p in stages.evaluation_points(mid, "test").values()] == [
        0.25, 0.5, 0.375, 0.75]
    # without a warm-up RL starts from the untrained model
    (run / "evals" / "after_sft.json").rename(run / "evals" / "untrained.json")
    assert list(stages.evaluation_points(run, "test")) == ["start", "stage 1", "stage 2", "end"]


def test_table_means_and_changes_pair_runs(stages, tmp_path):
    runs = [make_run(tmp_path / "s0", [0.25, 0.5, 0.375, 0.75]),
            make_run(tmp_path / "s1", [0.25, 0.25, 0.5, 0.5])]
    table = stages.stage_table(runs, "test", resamples=200).splitlines()
    solved = [line for line in table if line.startswith("| s0 |")][0]
    assert solved == "| s0 | 25.0 | 50.0 | 37.5 | 75.0 |"
    means = [line for line in table if line.startswith("| mean")]
    changes = [line for line in table if line.startswith("| change")]
    # tasks solved: means 25, 37.5, 43.75, 62.5; stage 1's change is +25 and +0 -> +12.5
    assert means[0].split(" | ")[1:3] == ["25.0 [25.0, 25.0]", "37.5 [25.0, 50.0]"]
    assert changes[0].split(" | ")[1:3] == ["-", "+12.5 [+0.0, +25.0]"]
    # checked-turn accuracy: the mean of the categories' (value, value / 2) = 0.75 x overall
    turn_end = np.mean([0.75 * 0.75, 0.75 * 0.5])
    assert means[1].split(" | ")[-1].startswith(f"{turn_end:.3f} [")


def test_runs_without_held_out_points_or_alike_points_fail_clearly(stages, tmp_path):
    run = make_run(tmp_path / "s0", [0.25, 0.5, 0.375, 0.75])
    with pytest.raises(ValueError, match="no split 'dev'"):
        stages.evaluation_points(run, "dev")
    other = make_run(tmp_path / "s1", [0.25, 0.5, 0.75], steps=(2,))
    with pytest.raises(ValueError, match="evaluation points"):
        stages.stage_table([run, other])
    (run / "evals" / "step_9.json").write_text((run / "evals" / "step_2.json").read_text())
    with pytest.raises(ValueError, match="step_9.json has no RL step 9"):
        stages.evaluation_points(run, "test")
    (run / "evals" / "step_9.json").unlink()
    (run / "evals" / "after_rl.json").unlink()
    with pytest.raises(ValueError, match="after_rl.json: missing"):
        stages.evaluation_points(run, "test")
