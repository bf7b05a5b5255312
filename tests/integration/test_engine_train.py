"""A training run that rolls out through the serving engine (`rollout.mode="engine"`): it trains
with one engine for the run, stamps each step's tokens with the learner's version, checks the
engine's weights against the learner's, resumes, and leaves no decode thread behind, error or not."""

import json
import threading

import pytest

from seetjax.rl import step_rollouts
from seetjax.rl.trainer import TrainRun
from tests.integration.test_train_damaged_resume import rl_only

pytestmark = pytest.mark.slow  # three short runs of the tiny config on the embedded model


def engine_run(steps: int):
    config = rl_only(steps)
    config.rollout.mode = "engine"
    # the tests have 8 CPU devices: the engine's rows are not split, the heads are
    config.learner.mesh = dict(data=1, fsdp=1, tensor=-1)
    config.learner.loss.entropy_coef = 0.01  # an update every step, rewards or not: new weights
    return config


def engine_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "seetjax-engine" and t.is_alive()}


def test_an_engine_run_trains_resumes_and_stops_its_engine(tmp_path, embedded_dir, monkeypatch):
    others = engine_threads()  # engines other tests of this worker keep (shared fixtures)
    TrainRun(engine_run(2), tmp_path).run()
    assert engine_threads() <= others
    TrainRun(engine_run(3), tmp_path).run()  # resumed at step 2
    assert engine_threads() <= others
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "stage" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    updates = 0  # the learner's version when each step sampled: its updates so far
    for r in steps:
        assert r["rollout/policy_tokens"] > 0
        assert r["rollout/versions"] == 1 and r["rollout/newest_version_share"] == 1
        assert r["rollout/oldest_version"] == updates and r["rollout/staleness"] == 0
        assert r["sync/weight_mismatch"] == 0
        assert r["alarm/weight_sync"] == 0 and "alarm/mismatch_kl" in r
        updates += "learner/no_signal" not in r
    assert updates > 0  # the engine was given weights it did not start with

    def fail(*args):  # once the step's policy has started the engine's decode thread
        assert engine_threads() - others
        raise RuntimeError("the weight check failed")

    monkeypatch.setattr(step_rollouts, "weight_sync", fail)
    with pytest.raises(RuntimeError, match="the weight check failed"):
        TrainRun(engine_run(4), tmp_path).run()
    assert engine_threads() <= others
