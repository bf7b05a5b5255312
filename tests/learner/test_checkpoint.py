"""Checkpoints: exact round trip, retention, non-finite refusal, and bitwise-exact resume after a
SIGKILL of the training process."""

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import flat_arrays, make_learner, rl_batch, tiny_model

from seetjax.learner.checkpoint import Checkpointer, DamagedCheckpoints

WORKER = Path(__file__).with_name("resume_worker.py")


@pytest.fixture(scope="module")
def trained():
    """A learner and a state after two updates (non-trivial optimizer state, step, rng)."""
    learner, state = make_learner(tiny_model(num_layers=1), {"algorithm": "grpo"})
    for seed in range(2):
        state, _ = learner.step(state, rl_batch(seed=seed))
    return learner, state.replace(rng=jax.random.key_data(jax.random.key(42)))


def test_round_trip_is_exact(trained, tmp_path):
    learner, state = trained
    expected = flat_arrays((state.step, state.params, state.opt_state, state.rng, state.skipped))
    checkpoints = Checkpointer(tmp_path)
    assert checkpoints.save(2, state, caller_state={"anchors": [[1, 2]], "stage": 3})
    checkpoints.wait()
    _, template = make_learner(tiny_model(num_layers=1, seed=9), learner.config)
    restored, caller = Checkpointer(tmp_path).restore(template)
    got = flat_arrays((restored.step, restored.params, restored.opt_state, restored.rng,
                       restored.skipped))
    assert all(np.array_equal(expected[k], got[k]) for k in expected)
    assert caller == {"anchors": [[1, 2]], "stage": 3}
    assert restored.reference is template.reference  # frozen parts come from the template
    restored, _ = learner.step(restored, rl_batch(seed=3))  # and it trains on
    assert int(restored.step) == 3


def test_keep_last_and_keep_best_survive_a_restart(trained, tmp_path):
    _, state = trained
    checkpoints = Checkpointer(tmp_path, keep_last=2, keep_best=1, best_metric="success")
    for step, success in zip(range(1, 6), [0.1, 0.9, 0.3, 0.2, 0.4]):
        checkpoints.save(step, state, metrics={"success": success})
    checkpoints.wait()
    assert checkpoints.all_steps() == [2, 4, 5] and checkpoints.best_step() == 2
    checkpoints.close()
    checkpoints = Checkpointer(tmp_path, keep_last=2, keep_best=1, best_metric="success")
    for step in (6, 7):
        checkpoints.save(step, state, metrics={"success": 0.5})
    checkpoints.wait()
    assert checkpoints.all_steps() == [2, 6, 7] and checkpoints.best_step() == 2


def test_non_finite_parameters_are_never_saved(trained, tmp_path):
    _, state = trained
    broken = state.replace(params=jax.tree.map(lambda x: x * jnp.nan, state.params))
    checkpoints = Checkpointer(tmp_path)
    assert not checkpoints.save(1, broken)
    checkpoints.wait()
    assert checkpoints.all_steps() == []


def _run(workdir, steps, out, kill_after=None):
    cmd = [sys.executable, str(WORKER), "--workdir", str(workdir), "--steps", str(steps),
           "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    if kill_after is None:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        return output
    for line in proc.stdout:
        if line.strip() == f"step {kill_after}":
            proc.send_signal(signal.SIGKILL)  # mid-run: the next update and save are under way
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_resume_after_sigkill_is_bitwise_exact(tmp_path):
    steps = 6
    _run(tmp_path / "straight", steps, tmp_path / "straight.npz")
    _run(tmp_path / "killed", steps, tmp_path / "unused.npz", kill_after=3)
    assert not (tmp_path / "unused.npz").exists()
    output = _run(tmp_path / "killed", steps, tmp_path / "resumed.npz")
    resumed_at = int(output.split("resumed at ")[1].split()[0])
    assert 2 <= resumed_at <= 4  # saves are serialised: step 2's was durable before step 3's began
    straight, resumed = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(straight.files) == sorted(resumed.files)
    for name in straight.files:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)


def test_a_relative_directory_works(trained, tmp_path, monkeypatch):
    learner, state = trained
    monkeypatch.chdir(tmp_path)
    checkpoints = Checkpointer("runs/relative/checkpoints")  # as `--workdir=runs/x` gives
    assert checkpoints.save(1, state)
    checkpoints.wait()
    assert (tmp_path / "runs/relative/checkpoints/1").is_dir()
    restored, _ = Checkpointer("runs/relative/checkpoints").restore(state)
    assert int(restored.step) == int(state.step)


def _truncate_largest_data_file(step_dir: Path) -> None:
    data = max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "d" in p.parts),
               key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])


@pytest.mark.parametrize("damage", ["truncated data", "empty metadata", "missing file"])
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # orbax's loop
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(trained, tmp_path, damage,
                                                                  caplog):
    learner, state = trained
    checkpoints = Checkpointer(tmp_path)
    first = state.replace(step=jnp.asarray(1, jnp.int32))
    assert checkpoints.save(1, first, caller_state={"at": 1})
    assert checkpoints.save(2, state, caller_state={"at": 2})
    checkpoints.wait()
    checkpoints.close()
    if damage == "truncated data":
        _truncate_largest_data_file(tmp_path / "2")
    elif damage == "empty metadata":
        (tmp_path / "2" / "state" / "_METADATA").write_text("")
    else:
        (tmp_path / "2" / "state" / "manifest.ocdbt").unlink()
    _, template = make_learner(tiny_model(num_layers=1, seed=9), learner.config)
    reopened = Checkpointer(tmp_path)
    with caplog.at_level("WARNING"):
        restored, caller, step = reopened.restore_intact(template)
    assert step == 1 and caller == {"at": 1} and int(restored.step) == 1
    assert "checkpoint 2 is damaged" in caplog.text
    assert (tmp_path / "damaged-2").is_dir() and reopened.all_steps() == [1]
    for key, value in flat_arrays(first.params).items():
        np.testing.assert_array_equal(value, flat_arrays(restored.params)[key])
    assert Checkpointer(tmp_path / "empty").restore_intact(template) is None


def _two_checkpoints(state, directory):
    """Checkpoints 1 and 2 of `state` (1's step field set to 1), closed."""
    checkpoints = Checkpointer(directory)
    first = state.replace(step=jnp.asarray(1, jnp.int32))
    assert checkpoints.save(1, first, caller_state={"at": 1})
    assert checkpoints.save(2, state, caller_state={"at": 2})
    checkpoints.wait()
    checkpoints.close()
    return first


def _flip_a_byte(step_dir: Path) -> None:
    """One byte of the largest array data file inverted, as a failing disk or copy leaves it."""
    data = max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "d" in p.parts),
               key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # orbax's loop
@pytest.mark.parametrize("damage", ["flipped byte", "edited caller state"])
def test_a_silently_corrupted_checkpoint_fails_its_checksum_and_falls_back(trained, tmp_path,
                                                                           damage, caplog):
    learner, state = trained
    first = _two_checkpoints(state, tmp_path)
    if damage == "flipped byte":
        _flip_a_byte(tmp_path / "2")
    else:  # valid JSON, other values: e.g. a hand-edited step
        (tmp_path / "2" / "caller" / "metadata").write_text('{"at": 3}')
    _, template = make_learner(tiny_model(num_layers=1, seed=9), learner.config)
    with caplog.at_level("WARNING"):
        restored, caller, step = Checkpointer(tmp_path).restore_intact(template)
    assert step == 1 and caller == {"at": 1}
    # A flipped byte that still decodes fails the arrays' checksum; one in a compressed
    # chunk's framing fails the read (orbax's layout, so which, varies between runs): both are
    # set aside. An edited caller state always decodes: its checksum must catch it.
    reasons = ("checksum",) if damage == "edited caller state" else ("checksum", "reading array")
    assert "checkpoint 2 is damaged" in caplog.text
    assert any(reason in caplog.text for reason in reasons)
    for key, value in flat_arrays(first.params).items():
        np.testing.assert_array_equal(value, flat_arrays(restored.params)[key])


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_checkpoint_its_caller_rejects_falls_back(trained, tmp_path, caplog):
    learner, state = trained
    _two_checkpoints(state, tmp_path)

    def check(step, caller):  # e.g. the trainer's anchor pool file of that step is missing
        if step == 2:
            raise FileNotFoundError("anchors/2.p0.json")

    with caplog.at_level("WARNING"):
        _, caller, step = Checkpointer(tmp_path).restore_intact(state, check=check)
    assert step == 1 and caller == {"at": 1}
    assert "checkpoint 2 is damaged (FileNotFoundError: anchors/2.p0.json)" in caplog.text


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_when_every_checkpoint_is_damaged_restoring_is_refused(trained, tmp_path):
    _, state = trained
    _two_checkpoints(state, tmp_path)
    for step in (1, 2):
        (tmp_path / str(step) / "state" / "manifest.ocdbt").unlink()
    with pytest.raises(DamagedCheckpoints, match=r"checkpoint 2 .*checkpoint 1 .*damaged-1"):
        Checkpointer(tmp_path).restore_intact(state)
    # set aside, they still count: a second attempt refuses too instead of starting over
    with pytest.raises(DamagedCheckpoints, match="damaged-1, damaged-2"):
        Checkpointer(tmp_path).restore_intact(state)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # orbax's loop
def test_a_full_disk_names_the_checkpoint_it_lost(trained, tmp_path, monkeypatch):
    from etils import epath

    _, state = trained
    write_text = epath.gpath.PosixGPath.write_text

    def full_at_step_2(path, *args, **kwargs):  # the caller state's write of checkpoint 2
        if f"{os.sep}2.orbax-checkpoint-tmp{os.sep}caller" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_text(path, *args, **kwargs)

    monkeypatch.setattr(epath.gpath.PosixGPath, "write_text", full_at_step_2)
    checkpoints = Checkpointer(tmp_path)
    assert checkpoints.save(1, state) and checkpoints.save(2, state)
    with pytest.raises(OSError, match=r"checkpoint 2 was not written: the disk is full") as e:
        checkpoints.save(3, state)
        checkpoints.wait()
    assert e.value.errno == errno.ENOSPC
    checkpoints.close()
    assert Checkpointer(tmp_path).all_steps() == [1]
