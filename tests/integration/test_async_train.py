"""Asynchronous RL runs (`rollout.schedule="async"`) of the tiny config, sampler and learner on
devices of their own (4 + 4 of the tests' 8): with a checkpoint after every step the pipeline
restarts each step and the run is the synchronous one, bit for bit; with fewer checkpoints later
steps train on tokens one version old, never older, and a run resumed from a checkpoint ends
where a straight one does."""

import json
import math
import threading

import numpy as np
import pytest

from seetjax.rl.trainer import TrainRun
from tests.integration.test_train import params
from tests.integration.test_train_damaged_resume import rl_only

pytestmark = pytest.mark.slow  # five short runs of the tiny config on the embedded model


def configured(steps: int, schedule: str, **rollout):
    config = rl_only(steps)
    config.rollout.update(schedule=schedule, **rollout)
    config.learner.loss.tis_cap = math.inf  # the decoupled objective, in both schedules
    config.learner.loss.entropy_coef = 0.01  # an update every step, rewards or not
    return config


def rl_rows(workdir):
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "stage" in r]


def producers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "rollout-producer" and t.is_alive()}


def test_with_a_checkpoint_every_step_async_is_the_synchronous_run(tmp_path, embedded_dir):
    TrainRun(configured(2, "sync", sampler_devices=4), tmp_path / "sync").run()
    TrainRun(configured(2, "async", sampler_devices=4), tmp_path / "async").run()
    assert not producers()
    straight, ahead = params(tmp_path / "sync"), params(tmp_path / "async")
    for name, value in straight.items():
        np.testing.assert_array_equal(value, ahead[name], err_msg=name)
    for a, b in zip(rl_rows(tmp_path / "sync"), rl_rows(tmp_path / "async"), strict=True):
        assert a["rollout/reward"] == b["rollout/reward"]
        assert a["rollout/policy_tokens"] == b["rollout/policy_tokens"]
        assert b["rollout/staleness"] == 0 and b["rollout/stale_dropped"] == 0


def test_on_devices_of_their_own_rollouts_run_one_version_behind_and_resume_exactly(
        tmp_path, embedded_dir):
    def run(steps, workdir):
        config = configured(steps, "async", sampler_devices=4, max_staleness=1)
        config.train.checkpoint_every = 2
        TrainRun(config, workdir).run()
        assert not producers()

    run(4, tmp_path / "straight")
    rows = rl_rows(tmp_path / "straight")
    # steps 1 and 3 start from a checkpoint (fresh weights); 2 and 4 played during an update
    assert [r["rollout/staleness"] for r in rows] == [0, 1, 0, 1]
    assert [r["rollout/oldest_version"] for r in rows] == [0, 0, 2, 2]
    for r in rows:
        assert r["sync/weight_mismatch"] == 0 and r["rollout/stale_dropped"] == 0
        assert "learner/no_signal" not in r and r["learner/tis_weight"] > 0
    run(2, tmp_path / "stopped")
    run(4, tmp_path / "stopped")  # resumed at step 2
    straight, resumed = params(tmp_path / "straight"), params(tmp_path / "stopped")
    for name, value in straight.items():
        np.testing.assert_array_equal(value, resumed[name], err_msg=name)
    assert [r["rollout/reward"] for r in rl_rows(tmp_path / "stopped")] == [
        r["rollout/reward"] for r in rows]


def test_engine_rollouts_play_ahead_on_a_tensor_parallel_sampler_mesh(tmp_path, embedded_dir):
    """rollout.mode "engine" with async: the run's engine, on 4 devices of its own (its rows
    whole on each, the model split), plays step 2 ahead during step 1's update, one version
    behind, and step 3 from the checkpoint's weights (version 2), which it is given; no engine
    or producer thread outlives the run."""
    def engines():
        return {t for t in threading.enumerate() if t.name == "seetjax-engine" and t.is_alive()}

    others = engines()
    config = configured(3, "async", sampler_devices=4, max_staleness=1, mode="engine")
    config.train.checkpoint_every = 2
    run = TrainRun(config, tmp_path)
    run.run()
    assert not producers() and engines() <= others
    assert dict(run.policies.sample_mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 4}
    engine = run.rollouts.engine
    assert engine.weight_version == 2 and engine.stats.finished > 0  # it played, and was updated
    rows = rl_rows(tmp_path)
    assert [r["rollout/staleness"] for r in rows] == [0, 1, 0]
    assert [r["rollout/oldest_version"] for r in rows] == [0, 0, 2]
    for r in rows:
        assert r["rollout/versions"] == 1 and r["rollout/policy_tokens"] > 0
        assert r["sync/weight_mismatch"] == 0 and r["rollout/stale_dropped"] == 0
