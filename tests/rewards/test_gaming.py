"""Every reward kind tested against gaming: the cheap behaviours that do not solve a turn never
score above an honest attempt at it, enumerated on episodes played through the real environment."""

import dataclasses

import pytest

from seetjax.envs.base import EpisodeTrace, StepCode
from seetjax.rewards import (
    AgentRewardConfig,
    ShapingConfig,
    agent_reward,
    gaming_metrics,
    progress_reward,
    step_rewards,
    turn_progress,
    unproductive_turns,
)
from tests.rewards.test_rewards import BASE0, calls, perfect, play

# BASE0's turns: [cd(document), mkdir(temp), mv(final_report.pdf, temp)],
# [cd(temp), grep(final_report.pdf, 'budget analysis')], [sort(final_report.pdf)], [diff(...)].
# Turn 1 is the turn under test, after a perfect turn 0 (cwd document/, the report in temp/).
CHEAP = {
    "silence": ["Done."],
    "giving up with a message": ["I cannot search that file, sorry."],
    "one harmless call": ["[ls()]", "Done."],
    "many harmless calls": ["[ls()]", "[pwd()]", "[ls(a=True)]", "[pwd()]", "Done."],
    "harmless calls at once": ["[ls(), pwd(), ls(a=True)]", "Done."],
    "repeating a previous correct call": ["[mkdir(dir_name='temp')]", "Done."],
    "repeating the previous turn": [calls(BASE0, 0), "Done."],
    "the right tools, garbage arguments": ["[cd(folder='zz'), grep(file_name='zz', pattern='zz')]",
                                           "Done."],
    "a malformed call": ["[cd(folder=temp)]"],  # a message that does not parse ends the turn
}
HONEST = {
    "the right tool, one wrong argument": ["[cd(folder='temp')]",
                                           "[grep(file_name='final_report.pdf', pattern='zz')]",
                                           "Done."],
    "the right tool, one wrong argument, failing": [
        "[cd(folder='temp')]", "[grep(file_name='report.pdf', pattern='budget analysis')]",
        "Done."],
    "a partially right turn": ["[cd(folder='temp')]", "Done."],
    "an execution error on the way to the right call": ["[cd(folder='tmp')]", "[cd(folder='temp')]",
                                                        "Done."],
    "a look around first": ["[ls()]", "[cd(folder='temp')]", "Done."],
    "errors down to the floor": ["[cd(folder='tmp')]", "[cd(folder='tmp2')]", "[cd(folder='tmp3')]",
                                 "[cd(folder='temp')]", "Done."],
}
CLEAN = ("the right tool, one wrong argument", "a partially right turn")  # no error, no stray call
SHAPED = {"default": ShapingConfig(),
          "charged calls": ShapingConfig(clean_call=-0.05, turn_failed=-0.3, turn_passed=2.0)}
AGENT = {"default": AgentRewardConfig(),
         "entry": AgentRewardConfig(completion_mode="entry", wrong_tool_penalty=0.6)}


def episode(turn_messages, rest="silent"):
    """BASE0 with turn 0 perfect, `turn_messages` as turn 1, then turns 2-3 silent or perfect."""
    later = ["Done."] * 2 if rest == "silent" else perfect(BASE0)[4:]
    return play(BASE0, perfect(BASE0)[:2] + turn_messages + later)


def scores(trace):
    """Every kind's score of one episode, by name."""
    out = {"progress": progress_reward(trace)}
    out.update({f"shaped {k}": sum(step_rewards(trace, c)) for k, c in SHAPED.items()})
    out.update({f"agent {k}": agent_reward(trace, c).total for k, c in AGENT.items()})
    return out


@pytest.fixture(scope="module", params=["silent", "perfect"])
def played(request):
    """name -> (trace, scores) for every behaviour on turn 1, the other turns fixed."""
    out = {}
    for name, messages in {**CHEAP, **HONEST}.items():
        trace = episode(messages, request.param)
        assert trace.verdicts[1].checked and not trace.verdicts[1].passed, name
        out[name] = trace, scores(trace)
    return out


def test_cheap_behaviours_score_as_silence_and_never_above_an_honest_attempt(played):
    silence = played["silence"][1]
    for kind in silence:
        for name in CHEAP:
            assert played[name][1][kind] == pytest.approx(silence[kind]), (kind, name)
        for name in HONEST:
            assert played[name][1][kind] >= silence[kind] - 1e-9, (kind, name)
        if kind != "progress":  # an episode reward of passed turns only cannot tell them apart
            for name in CLEAN:
                assert played[name][1][kind] > silence[kind] + 1e-3, (kind, name)


@pytest.mark.parametrize("padding", ["[ls()]", "[grep(file_name='zz', pattern='zz')]",
                                     "[cd(folder='temp')]"])
def test_cheap_calls_added_to_an_honest_attempt_earn_nothing(padding):
    """A harmless call, the right tool with garbage arguments, or a repeat, on top of a partly
    right turn: no kind scores it above the attempt alone."""
    honest = scores(episode(HONEST["a partially right turn"]))
    padded = scores(episode(["[cd(folder='temp')]", padding, "Done."]))
    for kind, score in padded.items():
        assert score <= honest[kind] + 1e-9, kind


def test_the_cheap_make_no_progress_and_the_honest_some(played):
    for name, (trace, _) in played.items():
        progress = turn_progress(trace)[1]
        assert (progress == 0) == (name in CHEAP), name
        assert (1 in unproductive_turns(trace)) == (name in CHEAP), name


def test_turn_progress_counts_matched_arguments_one_to_one():
    trace = episode(HONEST["the right tool, one wrong argument"])
    assert turn_progress(trace) == pytest.approx([1.0, (1 + 1 / 2) / 2, 0.0, 0.0])
    # The same call twice matches one ground-truth call once.
    twice = episode(["[cd(folder='temp')]", "[cd(folder='temp')]", "Done."])
    assert turn_progress(twice)[1] == pytest.approx(1 / 2)
    # A turn without ground-truth calls has nothing to progress toward.
    assert turn_progress(EpisodeTrace("none", (), (), ((),))) == [0.0]


def test_shaped_scores_an_unproductive_turn_as_one_plain_answer():
    config = SHAPED["charged calls"]
    trace = episode(CHEAP["many harmless calls"])
    turn1 = [r for s, r in zip(trace.steps, step_rewards(trace, config)) if s.turn == 1]
    assert turn1 == pytest.approx([0.0] * 4 + [config.no_call + config.turn_failed
                                               + config.unattempted_turn])
    # An honest attempt keeps its charges, floored.
    trace = episode(HONEST["errors down to the floor"])
    turn1 = [r for s, r in zip(trace.steps, step_rewards(trace, config)) if s.turn == 1]
    assert turn1 == pytest.approx([-0.2, -0.2, -0.1, 0.0, config.turn_failed])
    # Before this rule (no_progress_as_silence=False) harmless calls paid less than silence.
    old = dataclasses.replace(config, no_progress_as_silence=False, clean_call=0.0)
    harmless, silent = (sum(step_rewards(episode(CHEAP[k]), old)) for k in ("one harmless call",
                                                                             "silence"))
    assert harmless == pytest.approx(silent - old.unattempted_turn)


def test_shaping_refuses_code_values_that_pay_for_activity():
    for name in ("clean_call", "no_call", "execution_error", "format_error"):
        with pytest.raises(ValueError, match=rf"ShapingConfig.{name}=0.1: must be <= 0"):
            ShapingConfig(**{name: 0.1})
    with pytest.raises(ValueError, match="ShapingConfig.no_progress_as_silence=1: must be a bool"):
        ShapingConfig(no_progress_as_silence=1)


def test_agent_reward_names_the_turns_it_scored_as_silence():
    unproductive = agent_reward(episode(CHEAP["many harmless calls"]))
    silent = agent_reward(episode(CHEAP["silence"]))
    assert unproductive.silenced == silent.silenced == (1, 2, 3)  # turns 2-3 are silent
    assert unproductive.components == silent.components
    assert unproductive.penalties == silent.penalties == dict.fromkeys(silent.penalties, 0.0)
    # An honest attempt that scores above silence is scored as played.
    honest = agent_reward(episode(HONEST["a partially right turn"]))
    assert honest.silenced == (2, 3) and honest.total > silent.total
    # One whose penalties would take it below silence is scored as silence.
    looked = agent_reward(episode(HONEST["a look around first"]),
                          AgentRewardConfig(wrong_tool_penalty=1.0))
    assert looked.silenced == (1, 2, 3) and looked.total == pytest.approx(silent.total)


def test_gaming_metrics_count_checked_turns_failed_without_progress():
    traces = [episode(CHEAP["one harmless call"]), episode(CHEAP["silence"]),
              episode(HONEST["a partially right turn"]), episode(CHEAP["a malformed call"])]
    # 16 turns expect calls; turns 2-3 are silent everywhere, turn 1 twice unproductive.
    assert gaming_metrics(traces) == {"unproductive_turns": pytest.approx(2 / 16),
                                      "repeated_calls": 0.0}
    assert gaming_metrics([]) == {"unproductive_turns": 0.0, "repeated_calls": 0.0}
    # A timeout's skipped turns were never reached: not unproductive.
    timeout = play(BASE0, ["[ls()]"] * 25)
    assert timeout.steps[-1].timeout and unproductive_turns(timeout) == {0}
    assert all(s.code != StepCode.NO_CALL for s in timeout.steps)
