"""Stages, annealing, transitions and the fast loop's retry decision."""

import random

import pytest

from seetjax.rl.config import default_config
from seetjax.seet.config import StageConfig, default_stages
from seetjax.seet.curriculum import Curriculum, Transition, configured_stages, grant_retry


def test_default_stages_follow_the_method():
    s1, s2, s3, s4 = default_stages()
    assert s1.augmented and s1.retry_budget >= 2 and not s1.interception
    assert s2.augmented and s2.interception
    assert not s3.augmented and (s3.retry_probability(0.0), s3.retry_probability(1.0)) == (1.0, 0.2)
    assert not s4.augmented and s4.retry_budget == 0
    assert not s1.peer_anchors and not s2.peer_anchors and s3.peer_anchors


def test_a_budget_of_one_allows_exactly_one_retry():
    """The decision comes before the retry is counted (counting first never retried)."""
    stage = StageConfig(stage=1, retry_budget=1)
    rng = random.Random(0)
    used = 0
    decisions = []
    for _ in range(3):
        granted = grant_retry(stage, 0.0, used, rng)
        used += granted
        decisions.append(granted)
    assert decisions == [True, False, False] and used == 1
    assert not grant_retry(StageConfig(stage=4, retry_budget=0), 0.0, 0, rng)


def test_retry_probability_is_used():
    stage = StageConfig(stage=3, retry_budget=1, retry_probability_start=1.0,
                        retry_probability_end=0.2)
    rng = random.Random(1)
    rate = sum(grant_retry(stage, 1.0, 0, rng) for _ in range(4000)) / 4000
    assert abs(rate - 0.2) < 0.03
    assert stage.retry_probability(0.5) == pytest.approx(0.6)
    assert stage.retry_probability(3.0) == pytest.approx(0.2)  # clipped progress


def test_annealing_follows_training_steps_and_transitions():
    stages = default_stages()
    c = Curriculum(stages, [Transition(2), Transition(1), Transition(10), Transition(None)])
    assert c.stage.stage == 1
    assert not c.step() and c.step() and c.stage.stage == 2
    assert c.step() and c.stage.stage == 3
    probabilities = [c.retry_probability()]
    for _ in range(5):
        c.step()
        probabilities.append(c.retry_probability())
    assert probabilities == pytest.approx([1.0 - 0.8 * i / 9 for i in range(6)])
    for _ in range(4):
        c.step()
        probabilities.append(c.retry_probability())
    assert c.stage.stage == 3 and c.steps_in_stage == 9  # the stage's last step
    assert (probabilities[0], probabilities[-1]) == pytest.approx((1.0, 0.2))
    c.step()
    assert c.stage.stage == 4 and c.retry_probability() == 0.0
    assert [h["from_stage"] for h in c.history] == [1, 2, 3]


def test_metric_threshold_transition_and_state_round_trip():
    stages = default_stages()[:2]
    c = Curriculum(stages, [Transition(100, metric="format_validity", threshold=0.9, min_steps=2),
                            Transition(None)])
    assert not c.step({"format_validity": 0.95})  # before min_steps
    assert c.step({"format_validity": 0.95})
    assert c.history[-1]["reason"] == "format_validity"
    fresh = Curriculum(stages, [Transition(100), Transition(None)])
    fresh.load_state_dict(c.state_dict())
    assert (fresh.index, fresh.steps_in_stage, fresh.history) == (1, 0, c.history)


@pytest.mark.parametrize("kw,field", [(dict(env_mode="loud"), "env_mode"),
                                      (dict(retry_budget=-1), "retry_budget"),
                                      (dict(retry_probability_end=1.5), "retry_probability_end"),
                                      (dict(training_context="all"), "training_context")])
def test_bad_stage_fields_are_named(kw, field):
    with pytest.raises(ValueError, match=field):
        StageConfig(stage=1, **kw)


def test_only_the_last_stage_may_last_forever():
    with pytest.raises(ValueError, match="last stage"):
        Curriculum(default_stages()[:2], [Transition(None), Transition(None)])


@pytest.mark.parametrize("length", [2, 3, 10, 50])
def test_stage_3_anneals_from_start_on_its_first_step_to_end_on_its_last(length):
    """The probability a step's rollouts use (read before the step is counted, as the trainer
    does) is 1.0 on stage 3's first step and 0.2 on its last: the whole range is used."""
    c = Curriculum(default_stages()[2:], [Transition(length), Transition(None)])
    used = []
    while c.stage.stage == 3:
        used.append(c.retry_probability())
        c.step()
    assert len(used) == length
    assert used[0] == pytest.approx(1.0) and used[-1] == pytest.approx(0.2)
    assert all(a > b for a, b in zip(used, used[1:]))


def test_a_one_step_stage_uses_its_end_value_and_an_endless_one_its_start():
    c = Curriculum(default_stages()[2:], [Transition(1), Transition(None)])
    assert c.progress == 1.0 and c.retry_probability() == pytest.approx(0.2)
    endless = Curriculum(default_stages()[2:3], [Transition(None)])
    endless.step()
    assert endless.progress == 0.0 and endless.retry_probability() == pytest.approx(1.0)


def test_progress_resumes_from_the_state_and_stays_at_the_end_past_max_steps():
    c = Curriculum(default_stages()[2:3], [Transition(5)])  # the last stage: it goes on
    for _ in range(2):
        c.step()
    fresh = Curriculum(default_stages()[2:3], [Transition(5)])
    fresh.load_state_dict(c.state_dict())
    assert fresh.progress == c.progress == pytest.approx(0.5)
    for _ in range(6):
        c.step()
    assert c.progress == 1.0 and c.retry_probability() == pytest.approx(0.2)


def test_a_configs_seet_section_lays_out_its_stages_from_the_start_stage():
    seet = default_config().seet
    stages, transitions = configured_stages(seet)
    assert stages == default_stages()
    assert [t.max_steps for t in transitions] == [10, 10, 50, None]  # the last runs to the end
    seet.start_stage, seet.stage3.until_metric, seet.stage3.threshold = 3, "turn_accuracy", 0.5
    seet.stage3.min_steps = 2
    stages, transitions = configured_stages(seet)
    assert [s.stage for s in stages] == [3, 4]
    assert transitions == (Transition(50, "turn_accuracy", 0.5, 2), Transition(None))
    seet.single_stage = True
    assert configured_stages(seet) == ((default_stages()[2],), (Transition(None),))


@pytest.mark.parametrize("change, message", [
    ({"start_stage": 5}, "config.seet.start_stage=5"),
    ({"stage2.steps": 0}, "config.seet.stage2.steps=0: a stage before the last"),
    ({"stage1.retry_budget": -1}, "seet.stage1"),
])
def test_bad_stage_sections_fail_naming_the_field(change, message):
    seet = default_config().seet
    for dotted, value in change.items():
        section, _, name = dotted.rpartition(".")
        setattr(seet[section] if section else seet, name, value)
    with pytest.raises(ValueError, match=message):
        configured_stages(seet)
