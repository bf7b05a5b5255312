"""A training run resumed from a damaged workdir: damaged checkpoints fall back to the one before,
a torn metrics line is dropped, a run with no intact checkpoint refuses (unless told to start
over) and leaves metrics.jsonl as it was, and a full disk is reported at its step."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.learner.checkpoint import DamagedCheckpoints
from seetjax.rl.trainer import TrainRun
from seetjax.runtime.workdir import DiskFull

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,  # orbax's loop after the set-aside or failed saves
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]


def rl_only(steps: int):
    """configs/tiny.py without its warm-up (as tests/integration/test_train.py's RL_ONLY), a
    checkpoint after every step, all three kept."""
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.sft.enabled = False
    config.data.categories, config.data.tasks_per_category = "base", 2
    config.eval.splits, config.eval.per_category = "", 1
    config.train.steps, config.train.checkpoint_every, config.train.keep_checkpoints = steps, 1, 3
    for stage in (1, 2, 3):
        config.seet[f"stage{stage}"].steps = 1
    config.limits.max_episode_tokens, config.limits.max_reply_tokens = 768, 16
    config.limits.max_turn_tokens = 32
    return config


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory, embedded_dir):
    """A finished run of three steps, checkpoints 1-3 kept; each test damages a copy."""
    workdir = tmp_path_factory.mktemp("run") / "three_steps"
    TrainRun(rl_only(3), workdir).run()
    return workdir


def rl_steps(workdir: Path) -> list[int]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "stage" in r]


def flip_a_byte(step_dir: Path) -> None:
    data = max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "d" in p.parts),
               key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))


def test_damaged_checkpoints_fall_back_and_a_torn_metrics_line_is_dropped(
        three_steps, tmp_path, caplog, capsys):
    workdir = Path(shutil.copytree(three_steps, tmp_path / "run"))
    (workdir / "checkpoints" / "3" / "caller" / "metadata").write_text("{}")
    (workdir / "anchors" / "2.p0.json").unlink()
    with open(workdir / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rollout/rew')  # a write cut short
    with caplog.at_level("WARNING"):
        TrainRun(rl_only(3), workdir).run()
    assert "checkpoint 3 is damaged (ChecksumError" in caplog.text
    assert "checkpoint 2 is damaged (FileNotFoundError" in caplog.text
    assert "metrics.jsonl: 1 unreadable line dropped" in caplog.text
    assert "resumed at step 1" in capsys.readouterr().out
    assert rl_steps(workdir) == [1, 2, 3]  # steps 2 and 3 trained again, each written once
    assert sorted(os.listdir(workdir / "checkpoints")) == ["1", "2", "3", "damaged-2",
                                                           "damaged-3"]


def test_with_every_checkpoint_damaged_the_run_refuses_unless_told_to_start_over(
        three_steps, tmp_path):
    workdir = Path(shutil.copytree(three_steps, tmp_path / "run"))
    for step in (1, 2, 3):
        flip_a_byte(workdir / "checkpoints" / str(step))
    metrics = (workdir / "metrics.jsonl").read_bytes()
    # Each damage is named; which check finds a flipped byte depends on where it lands in the
    # compressed data (the arrays' checksum for one that still decodes, the read for one that
    # does not), and orbax's file layout varies between runs.
    with pytest.raises(DamagedCheckpoints, match=r"checkpoint 3 \(.*checkpoint 2 \(.*checkpoint 1 "
                                                 r"\(.*--start_over"):
        TrainRun(rl_only(3), workdir).run()
    assert (workdir / "metrics.jsonl").read_bytes() == metrics  # the run's record, untouched
    TrainRun(rl_only(1), workdir, start_over=True).run()
    assert rl_steps(workdir) == [1]


def test_a_full_disk_is_reported_at_its_step(three_steps, tmp_path, monkeypatch):
    workdir = Path(shutil.copytree(three_steps, tmp_path / "run"))
    write_text = Path.write_text

    def full_at_step_4(path, *args, **kwargs):  # the anchor pool saved beside checkpoint 4
        if path.parent.name == "anchors" and path.name.startswith("4."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_at_step_4)
    with pytest.raises(DiskFull, match=r"the disk is full at RL step 4 .*anchors/4\.p0\."):
        TrainRun(rl_only(4), workdir).run()
    assert rl_steps(workdir) == [1, 2, 3, 4]
