"""Asynchronous RL's pieces without a model: the producer plays each step with the snapshot its
rule names and never earlier, pauses for evaluations, hands errors to the trainer; the staleness
guard drops whole groups; the schedule's config is refused where it could not work."""

import dataclasses
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from seetjax.config.sections import load_config_file
from seetjax.rl.alarms import params_checksum
from seetjax.rl.async_rollouts import RolloutPipeline, Snapshot, checked
from seetjax.rl.config import build_plan
from seetjax.rl.schedule import ScheduleConfig
from seetjax.rl.trainer import TrainRun
from seetjax.rollout.loop import Played
from seetjax.rollout.result import PlayTimes
from seetjax.rollout.versions import fresh_episodes
from seetjax.seet.config import PLAIN_STAGE

ROOT = Path(__file__).resolve().parents[2]


def snapshot(done: int) -> Snapshot:
    return Snapshot(done, params=f"weights after {done}", version=done, learner_checksum=0,
                    stage=PLAIN_STAGE, progress=0.0)


class Recorder:
    """A play function that records which snapshot each step played with, and what had been
    published when it started."""

    def __init__(self, pipeline_published: list[int]):
        self.published, self.calls = pipeline_published, []

    def __call__(self, step: int, snap: Snapshot) -> Played:
        self.calls.append((step, snap.done, max(self.published)))
        return Played([], PlayTimes(), snap.stage)


def run_steps(first: int, last: int, lag: int, every: int) -> list[tuple[int, int, int]]:
    """A trainer's loop against the pipeline: take step s, 'update', publish s + 1 done."""
    published = [first]
    play = Recorder(published)
    pipeline = RolloutPipeline(play, first, last, lag, every)
    pipeline.publish(snapshot(first))
    for step in range(first, last):
        played, snap = pipeline.take(step)
        assert snap.done == pipeline.source(step)
        published.append(step + 1)
        pipeline.publish(snapshot(step + 1))
    pipeline.close()
    return play.calls


def test_each_step_plays_with_the_snapshot_its_rule_names_and_never_before_it_exists():
    calls = run_steps(0, 7, lag=1, every=100)
    assert [(s, d) for s, d, _ in calls] == [(0, 0), (1, 0), (2, 1), (3, 2), (4, 3), (5, 4),
                                            (6, 5)]
    assert all(newest >= done for _, done, newest in calls)
    calls = run_steps(0, 7, lag=2, every=100)
    assert [d for _, d, _ in calls] == [0, 0, 0, 1, 2, 3, 4]


def test_a_checkpoint_starts_the_pipeline_over_so_a_resumed_run_plays_the_same():
    straight = run_steps(0, 8, lag=1, every=3)
    assert [d for _, d, _ in straight] == [0, 0, 1, 3, 3, 4, 6, 6]  # steps 3 and 6: fresh
    resumed = run_steps(3, 8, lag=1, every=3)  # from the checkpoint after step 3
    assert [(s, d) for s, d, _ in resumed] == [(s, d) for s, d, _ in straight[3:]]


def test_the_producer_checks_each_snapshot_before_it_plays_it():
    weights = {"w": np.arange(4, dtype=np.float32)}
    good = Snapshot(0, weights, 0, params_checksum(weights), PLAIN_STAGE, 0.0)
    assert math.isnan(good.weight_mismatch) and checked(good).weight_mismatch == 0.0
    bad = dataclasses.replace(good, learner_checksum=good.learner_checksum + 1)
    assert checked(bad).weight_mismatch == 1.0
    threads = []

    def check(snap: Snapshot) -> Snapshot:  # on the producer's thread, not the trainer's
        threads.append(threading.current_thread().name)
        return dataclasses.replace(snap, weight_mismatch=0.5)

    pipeline = RolloutPipeline(lambda step, snap: Played([], PlayTimes(), snap.stage), 0, 1,
                               lag=0, checkpoint_every=100, check=check)
    pipeline.publish(snapshot(0))
    _, snap = pipeline.take(0)
    pipeline.close()
    assert snap.weight_mismatch == 0.5 and threads == ["rollout-producer"]


def test_the_producer_waits_for_a_pause_and_a_pause_waits_for_the_rollout_playing():
    started, release = threading.Event(), threading.Event()

    def play(step, snap):
        started.set()
        release.wait(5)
        return Played([], PlayTimes(), snap.stage)

    pipeline = RolloutPipeline(play, 0, 3, lag=1, checkpoint_every=100)
    pipeline.publish(snapshot(0))
    assert started.wait(5)
    entered = threading.Event()

    def evaluate():
        with pipeline.paused():
            entered.set()
            time.sleep(0.2)  # the producer must not start step 1 in here

    evaluation = threading.Thread(target=evaluate)
    evaluation.start()
    assert not entered.wait(0.2)  # step 0 is still playing
    started.clear()
    release.set()
    assert entered.wait(5)
    assert not started.is_set()  # snapshot 0 serves step 1 too, yet it waits for the pause
    evaluation.join()
    assert started.wait(5)
    pipeline.take(0), pipeline.take(1)
    pipeline.close()


def test_an_error_in_a_rollout_reaches_the_trainer():
    def play(step, snap):
        raise OSError("the environment went away")

    pipeline = RolloutPipeline(play, 0, 2, lag=1, checkpoint_every=100)
    pipeline.publish(snapshot(0))
    with pytest.raises(RuntimeError, match="rollout of RL step 1 failed") as error:
        pipeline.take(0)
    assert isinstance(error.value.__cause__, OSError)
    pipeline.close()


@dataclasses.dataclass
class FakeConversation:
    versions: list[int]

    def training_versions(self):
        return np.asarray(self.versions, np.int32)


@dataclasses.dataclass(eq=False)
class FakeEpisode:
    task_id: str
    conversation: FakeConversation


def test_a_group_with_one_token_beyond_the_bound_is_dropped_whole():
    episodes = [FakeEpisode("a", FakeConversation([-1, 4, 4, -1, 5])),
                FakeEpisode("a", FakeConversation([-1, 5, 5])),
                FakeEpisode("b", FakeConversation([-1, 2, 5])),  # a version-2 token
                FakeEpisode("b", FakeConversation([-1, 5])),
                FakeEpisode("c", FakeConversation([-1, -1]))]  # nothing sampled: nothing stale
    kept, dropped = fresh_episodes(episodes, learner_version=5, max_staleness=1)
    assert [e.task_id for e in kept] == ["a", "a", "c"] and dropped == 2
    kept, dropped = fresh_episodes(episodes, learner_version=5, max_staleness=3)
    assert len(kept) == 5 and dropped == 0


def tiny(**rollout):
    config = load_config_file(ROOT / "configs" / "tiny.py")
    config.rollout.update(rollout)
    return config


def test_the_schedule_is_sync_by_default_and_async_derives_its_lag():
    assert build_plan(tiny()).schedule == ScheduleConfig()
    assert build_plan(tiny()).learner.term("policy_gradient").config.tis_cap is None
    # from the command line alone: the decoupled objective, the behaviour log-probs uncapped
    decoupled = build_plan(tiny(schedule="async"))
    assert decoupled.learner.term("policy_gradient").config.tis_cap == math.inf
    capped = tiny(schedule="async")
    capped.learner.loss.tis_cap = 2.0  # truncated importance sampling
    assert build_plan(capped).learner.term("policy_gradient").config.tis_cap == 2.0
    config = tiny(schedule="async", max_staleness=4)
    config.learner.loss.tis_cap = math.inf  # AReaL's decoupled objective: no cap
    config.learner.mini_batches = 2
    config.seet.max_pairs = 8
    plan = build_plan(config)
    assert plan.schedule.lag(plan.learner.mini_batches) == 2


@pytest.mark.parametrize("change,message", [
    (dict(schedule="later"), r"ScheduleConfig.schedule='later': must be one of \('sync', "
                             r"'async'\)"),
    (dict(schedule="async", max_staleness=-1), r"max_staleness=-1: must be an integer >= 0"),
    (dict(schedule="async", tis_cap=2.0, max_staleness=1, mini_batches=2),
     r"config.rollout.max_staleness=1: each step's update is learner.mini_batches=2 versions"),
])
def test_what_an_async_schedule_cannot_do_is_refused_naming_the_field(change, message):
    change = dict(change)
    config = tiny()
    if "tis_cap" in change:
        config.learner.loss.tis_cap = change.pop("tis_cap")
    if "mini_batches" in change:
        config.learner.mini_batches = change.pop("mini_batches")
        config.seet.max_pairs = 8
    config.rollout.update(change)
    with pytest.raises(ValueError, match=message):
        build_plan(config)


def test_teams_do_not_play_ahead():
    config = load_config_file(ROOT / "configs" / "qa_multi_agent.py")
    config.rollout.schedule = "async"
    config.learner.loss.tis_cap = 2.0
    with pytest.raises(ValueError, match=r"schedule='async': not with multi_agent.enabled"):
        build_plan(config)
    config.rollout.schedule, config.rollout.sampler_devices = "sync", 2
    with pytest.raises(ValueError, match=r"sampler_devices=2: a sampler mesh of its own serves "
                                         r"single-agent rollouts only"):
        build_plan(config)


def test_async_on_shared_devices_is_refused_where_programs_could_deadlock(tmp_path):
    config = tiny(schedule="async")  # the tests' 8 CPU devices
    config.learner.loss.tis_cap = 2.0
    with pytest.raises(ValueError, match=r"config.rollout.sampler_devices=0: with schedule="
                                         r"'async' on 8 devices, the sampler needs devices of"):
        TrainRun(config, tmp_path)
    config.rollout.sampler_devices = 8
    with pytest.raises(ValueError, match=r"sampler_devices=8: leaves none of the 8 devices"):
        TrainRun(config, tmp_path)
    assert not (tmp_path / "config.json").exists()
