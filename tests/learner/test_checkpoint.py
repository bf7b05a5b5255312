"""Checkpoints: exact round trip, retention, non-finite refusal, and bitwise-exact resume after a
SIGKILL of the training process."""

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

from seetjax.learner.checkpoint import Checkpointer

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
