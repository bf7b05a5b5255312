"""Repeated calls and message counts, the hack the testbed's RL found on 2026-11-27 (the withheld
function called 13 times in a miss_func task's turn without ground truth, `ls()` 6 times): no
reward kind pays for a repeat, and under GRPO's process supervision no message earns credit for
being one more. Episodes are played through the real environment."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.losses.advantages import GRPOAdvantageConfig, grpo_advantages
from seetjax.rewards import (
    RewardConfig,
    ShapingConfig,
    assigned_rewards,
    gaming_metrics,
    repeated_calls,
    step_rewards,
)
from tests.rewards.test_gaming import SHAPED, episode, scores
from tests.rewards.test_rewards import BASE0, play

MISS_FUNC3 = load_tasks("miss_func")[3]  # turns: [] (find withheld), [find(...)], [cd, cd, cp, cp]
FIND = "[find(path='.', name='test')]"
GREP = "[grep(file_name='final_report.pdf', pattern='budget analysis')]"  # BASE0, turn 1
OLD = ShapingConfig(no_progress_as_silence=False)


def test_repeated_calls_are_canonical_repeats_within_a_turn_beyond_the_ground_truth():
    trace = episode(["[cd(folder='temp')]", GREP, "[grep(pattern='budget analysis', "
                     "file_name='final_report.pdf'), cd(folder='temp')]", "Done."])
    # turn 0's three calls and its answer, then cd, grep, and both again (keywords reordered)
    assert repeated_calls(trace) == [0, 0, 0, 0, 2, 0, 0, 0]
    # the same call in another turn is no repeat
    assert sum(repeated_calls(play(BASE0, ["[cd(folder='document')]", "Done.",
                                           "[cd(folder='document')]", "Done."]))) == 0
    assert gaming_metrics([trace])["repeated_calls"] == pytest.approx(2 / 7)


def test_a_passed_turn_padded_with_repeats_scores_below_the_turn_unpadded():
    honest = episode(["[cd(folder='temp')]", GREP, "Done."])
    padded = episode(["[cd(folder='temp')]", GREP, GREP, GREP, "Done."])
    assert honest.verdicts[1].passed and padded.verdicts[1].passed
    padded_scores = scores(padded)
    for kind, score in scores(honest).items():
        if kind != "progress":  # passed turns only: it cannot tell them apart
            assert padded_scores[kind] < score - 1e-3, kind
    # Before 2026-11-27 the repeats were free.
    assert sum(step_rewards(padded, OLD)) == pytest.approx(sum(step_rewards(honest, OLD)))


@pytest.mark.parametrize("config", list(SHAPED.values()), ids=list(SHAPED))
def test_each_repeat_in_a_failed_turn_costs_its_charge(config):
    """A failed turn with progress (the right cd, a grep that finds nothing): each repeat of the
    grep pays its clean call (above the floor here) and `repeated_call`, outside the floor."""
    wrong = "[grep(file_name='final_report.pdf', pattern='zz')]"
    once = sum(step_rewards(episode(["[cd(folder='temp')]", wrong, "Done."]), config))
    for repeats in (1, 3):
        trace = episode(["[cd(folder='temp')]"] + [wrong] * (1 + repeats) + ["Done."])
        assert not trace.verdicts[1].passed
        assert sum(step_rewards(trace, config)) == pytest.approx(
            once + repeats * (config.clean_call + config.repeated_call))


def test_calls_in_a_turn_without_ground_truth_never_score_above_saying_so():
    """miss_func's withheld-function turn: the honest answer makes no call; calling the withheld
    function, or a harmless listing, once or over and over, scores below it in every kind."""
    rest = ["Done."] * 2
    honest = scores(play(MISS_FUNC3, ["I cannot: no tool here finds files."] + rest))
    for calls in ([FIND], [FIND] * 6, ["[ls()]"] * 3):
        cheap = scores(play(MISS_FUNC3, calls + ["Done."] + rest))
        for kind, score in honest.items():
            assert cheap[kind] < score, (kind, calls)


def first_token_advantages(traces, reward):
    """GRPO's advantage of each row's first message in one group, each step's reward on its own
    position (one reply per step, as the rollout places them); one width, one compilation."""
    width = 16
    rewards, marked = np.zeros((len(traces), width), np.float32), np.zeros((len(traces), width),
                                                                           np.float32)
    for row, trace in enumerate(traces):
        for step, value in assigned_rewards(trace, reward):
            position = len(trace.steps) if step is None else step
            rewards[row, position] += value
            marked[row, position] = 1.0
    advantages, _ = grpo_advantages(jnp.asarray(rewards), jnp.asarray(marked),
                                    jnp.zeros(len(traces), jnp.int32), jnp.ones(len(traces)),
                                    GRPOAdvantageConfig())
    return np.asarray(advantages)[:, 0]


def test_grpo_credits_no_message_for_being_one_more():
    """The demo's hack: in a group whose rewards average below 0, a message worth 0 was centred
    to a positive reward that every earlier token got as credit, so padding the withheld-function
    turn with more calls of the withheld function raised its advantage at an equal return. One
    reward per turn, and a charge per repeat, order the rows by what they did."""
    rest = ["Done."] * 3  # turns 1-2 silent in every row
    three, six = (play(MISS_FUNC3, [FIND] * n + rest) for n in (3, 6))
    honest = play(MISS_FUNC3, ["I cannot: no tool here finds files."] + rest[1:])
    shaped = RewardConfig("shaped")
    padded, once, said_so = first_token_advantages([six, three, honest], shaped)
    assert said_so > once > padded
    # Before 2026-11-27: an equal return, and the padded row credited above the other.
    old = RewardConfig("shaped", shaping=OLD)
    assert sum(step_rewards(six, OLD)) == pytest.approx(sum(step_rewards(three, OLD)))
    padded, once, _ = first_token_advantages([six, three, honest], old)
    assert padded > once + 0.1
    # per_turn=False keeps the charge but one reward per message.
    per_message = RewardConfig("shaped", shaping=dataclasses.replace(ShapingConfig(),
                                                                     per_turn=False))
    assert [s for s, _ in assigned_rewards(six, per_message)] == list(range(len(six.steps)))
    assert [s for s, _ in assigned_rewards(six, shaped)] == [
        i for i, s in enumerate(six.steps) if s.turn_ended]


def test_shaping_validates_the_repeat_fields():
    with pytest.raises(ValueError, match=r"ShapingConfig\.repeated_call=0\.1: must be <= 0"):
        ShapingConfig(repeated_call=0.1)
    with pytest.raises(ValueError, match=r"ShapingConfig\.per_turn=1: must be a bool"):
        ShapingConfig(per_turn=1)
