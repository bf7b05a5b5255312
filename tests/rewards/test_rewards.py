"""Rewards on episodes played through the real environment with scripted messages."""

import dataclasses

import pytest

from seetjax.envs.base import EpisodeTrace, StepCode, StepResult, TurnVerdict
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.rewards import (
    AgentRewardConfig,
    ShapingConfig,
    agent_reward,
    envtuning_scores,
    format_reward,
    progress_reward,
    step_codes,
    step_rewards,
)
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ExecutionResult

BASE0 = load_tasks("base")[0]  # turns: [cd, mkdir, mv], [cd, grep], [sort], [diff]
MISS_PARAM0 = load_tasks("miss_param")[0]  # 5 turns, turn 3 expects no call


def calls(task, turn):
    return "[" + ", ".join(c.to_python() for c in task.ground_truth[turn]) + "]"


def play(task, messages, config=None):
    env = BfclEnv(config)
    env.reset(task)
    for message in messages:
        if env.done:
            break
        env.step(message)
    return env.trace()


def perfect(task):
    return [m for t in range(task.num_turns)
            for m in ([calls(task, t)] if task.ground_truth[t] else []) + ["Done."]]


def test_perfect_episode_scores_full_marks():
    trace = play(BASE0, perfect(BASE0))
    assert step_codes(trace) == [-1, 1] * 4
    scores = envtuning_scores(trace)
    assert (scores.progress, scores.format, scores.tool_call, scores.made_tool_calls) == (1, 1, 1, True)
    reward = agent_reward(trace)
    assert reward.components == dict.fromkeys(reward.components, 1.0)
    assert set(reward.penalties.values()) == {0.0} and reward.total == pytest.approx(1.0)


def test_envtuning_codes_progress_and_format():
    messages = ["[cd(folder='document'), mkdir(dir_name='temp')]",  # clean: -1
                "[mv(source='final_report.pdf', destination='temp'), cd(folder='no')]",  # -2
                "ok",  # ends turn 0, which passes: 1
                "[cd(folder=temp)]",  # format error ending turn 1, which fails (no call): -3, 0
                "[cd(folder='temp'), sort(file_name='final_report.pdf')]", "fine",  # -1, 1
                calls(BASE0, 3), "fine"]  # -1, 1
    trace = play(BASE0, messages)
    assert step_codes(trace) == [-1, -2, 1, -3, 0, -1, 1, -1, 1]
    assert progress_reward(trace) == 0.75
    assert format_reward(trace) == pytest.approx(8 / 9)
    assert envtuning_scores(trace).tool_call == pytest.approx(3 / 4)
    assert progress_reward(play(BASE0, [])) == 0.0 and format_reward(play(BASE0, [])) == 0.0


def test_shaping_rewards_one_per_message():
    messages = [calls(BASE0, 0), "[cd(folder=x)]",  # a format error ends turn 0, which passes
                "[cd(folder='nowhere')]", calls(BASE0, 1), "ok"]
    trace = play(BASE0, messages)
    config = ShapingConfig(format_error=-0.5, execution_error=-0.2, turn_passed=1.0, turn_failed=-0.1)
    assert step_rewards(trace, config) == pytest.approx([0.0, -0.5 + 1.0, -0.2, 0.0, 1.0])
    timeout = play(BASE0, ["[pwd()]"] * 3, BfclEnvConfig(max_steps_per_turn=2))
    # pwd makes no progress toward turn 0: scored as silence (-0.5), then the timeout
    assert step_rewards(timeout, config) == pytest.approx([0.0, 0.0, -0.1 - 0.5 - 1.0])


def test_shaping_charges_a_silent_failed_turn_no_less_than_any_failed_attempt():
    config = ShapingConfig()  # execution_error -0.2, unattempted_turn and the floor -0.5
    silent = step_rewards(play(BASE0, ["Done."]), config)
    assert silent == pytest.approx([config.turn_failed + config.unattempted_turn])
    # Four failed calls that make progress (the right mv, before the cd it needs): the third is
    # charged only down to the floor, the fourth nothing; each repeat of the call pays
    # `repeated_call` on top, outside the floor.
    mv = "[mv(source='final_report.pdf', destination='temp')]"
    stubborn = play(BASE0, [mv] * 4 + ["Done."])
    floored = [-0.2, -0.2, -0.1, 0.0, config.turn_failed]
    assert step_rewards(stubborn, dataclasses.replace(config, repeated_call=0.0)) == (
        pytest.approx(floored))
    assert step_rewards(stubborn, config) == pytest.approx(
        [r + config.repeated_call * (0 < i < 4) for i, r in enumerate(floored)])
    config = dataclasses.replace(config, repeated_call=0.0)  # the floor alone, from here on
    # BFCL's step limit: the timeout is charged on top of the floor (so it can fall below silence)
    limited = play(BASE0, [mv] * 3, BfclEnvConfig(max_steps_per_turn=2))
    assert step_rewards(limited, config) == pytest.approx(
        [-0.2, -0.2, -0.1 + config.turn_failed + config.timeout])
    # The floor is per turn: turn 1's failed call is charged in full after turn 0's were capped.
    grep = "[grep(file_name='final_report.pdf', pattern='budget analysis')]"  # before its cd
    later = play(BASE0, [mv] * 3 + [calls(BASE0, 0), "Done.", grep, "Done."])
    assert step_rewards(later, config)[-2:] == pytest.approx([-0.2, config.turn_failed])
    # unattempted_turn=0, no floor, and calls that make no progress charged like any: the
    # per-call penalties alone, as before 2026-11-26.
    plain = ShapingConfig(unattempted_turn=0.0, turn_penalty_floor=float("-inf"),
                          no_progress_as_silence=False)
    assert step_rewards(play(BASE0, ["[cd(folder='nowhere')]"] * 4 + ["Done."]), plain) == (
        pytest.approx([-0.2] * 4 + [0.0]))
    with pytest.raises(ValueError, match="turn_penalty_floor"):
        ShapingConfig(turn_penalty_floor=0.1)
    with pytest.raises(ValueError, match="unattempted_turn"):
        ShapingConfig(unattempted_turn=float("-inf"))


def test_unattempted_turns_are_reached_checked_turns_failed_without_a_call():
    assert play(BASE0, ["Done.", calls(BASE0, 1), "Done.", "Done."]).unattempted_turns() == {0, 2}
    # A malformed call is an attempt; a failed call is one too.
    assert play(BASE0, ["[cd(folder=x)]", "[cd(folder='nowhere')]", "Done."]
                ).unattempted_turns() == set()
    # A timeout fails the turns it skips; the model never reached them.
    timeout = play(BASE0, ["Done."] + ["[pwd()]"] * 3, BfclEnvConfig(max_steps_per_turn=2))
    assert len(timeout.verdicts) == 4 and timeout.unattempted_turns() == {0}
    # A failed turn that expected no call is never silent, even where its verdict is "checked"
    # (QA's answer turn): only turns with ground-truth calls can be.
    prose = StepResult(0, StepCode.NO_CALL, (), verdicts=(TurnVerdict(0, False, True),))
    assert EpisodeTrace("qa", (prose,), prose.verdicts, ((),)).unattempted_turns() == set()
    assert EpisodeTrace("bfcl", (prose,), prose.verdicts, ((ToolCall("pwd", {}),),)
                        ).unattempted_turns() == {0}


def test_tool_accuracy_efficiency_and_wrong_tool_penalty():
    # Turn 0 adds a pwd (a wrong tool) and drops nothing; turns 1-3 are perfect.
    messages = ["[pwd(), " + calls(BASE0, 0)[1:], "ok"] + perfect(BASE0)[2:]
    reward = agent_reward(play(BASE0, messages))
    precision, recall = 10 / 11, 10 / 10  # the ground truth makes 10 calls
    assert reward.components["tool_accuracy"] == pytest.approx(2 * precision * recall / (precision + recall))
    assert reward.components["efficiency"] == pytest.approx(10 / 11)
    assert reward.penalties["wrong_tool"] == 1


def test_redundant_calls_are_repeats_of_successful_calls_beyond_the_ground_truth():
    # The second cd repeats a call that succeeded (it then fails: no document/document); the
    # second mkdir too. A failed call may be retried: the pwd after a failed pwd is not counted.
    messages = ["[cd(folder='document'), cd(folder='document')]", "[mkdir(dir_name='temp')]",
                "[mkdir(dir_name='temp')]", "[pwd(x=1)]", "[pwd(x=1)]"]
    reward = agent_reward(play(BASE0, messages))
    assert reward.penalties["redundant_call"] == 2
    # Ground truth that repeats a call allows as many repeats (no BFCL entry does; built by hand).
    up = ToolCall("cd", {"folder": ".."})
    step = StepResult(0, StepCode.CLEAN_CALL, (), (up,) * 3,
                      tuple(ExecutionResult(up, "None") for _ in range(3)))
    trace = EpisodeTrace("hand-made", (step,), (), ((up, up),))
    assert agent_reward(trace).penalties["redundant_call"] == 1


def test_timing_rewards_calling_exactly_when_the_ground_truth_does():
    messages = []
    for t, expected in enumerate(MISS_PARAM0.ground_truth):
        messages += ([calls(MISS_PARAM0, t)] if expected else ["[pwd()]"]) + ["Done."]
    reward = agent_reward(play(MISS_PARAM0, messages))
    assert reward.components["timing"] == pytest.approx(4 / 5)
    assert reward.components["completion"] == pytest.approx(4 / 5)  # the no-call turn failed
    entry = agent_reward(play(MISS_PARAM0, messages), AgentRewardConfig(completion_mode="entry"))
    assert entry.components["completion"] == 1.0  # BFCL does not judge no-call turns


def test_format_and_timeout_penalties_and_clipping():
    # Turn 0 passes on a message that does not parse; turn 1 runs into BFCL's step limit with
    # calls that make no progress: it is scored as given up, its timeout kept.
    trace = play(BASE0, [calls(BASE0, 0), "[cd(folder=x)]"] + ["[pwd()]"] * 3,
                 BfclEnvConfig(max_steps_per_turn=2))
    reward = agent_reward(trace)
    assert reward.silenced == (1,)
    assert reward.penalties["format_error"] == 1 and reward.penalties["timeout"] == 1
    assert reward.components["format"] == pytest.approx(2 / 3)
    assert reward.components["completion"] == 0.25
    harsh = AgentRewardConfig(timeout_penalty=10.0, min_reward=-2.0)
    assert agent_reward(trace, harsh).total == -2.0
    with pytest.raises(ValueError):
        AgentRewardConfig(completion_mode="sometimes")


def cut_off(trace):
    """The trace as the rollout leaves it when the context fills up (see Episode.trace)."""
    return dataclasses.replace(trace, truncated=True)


def test_progress_counts_unreached_turns_as_failed():
    # Turn 0 of 4 passes, then the episode is cut off: 1/4, not 1/1 (the turns judged).
    trace = cut_off(play(BASE0, perfect(BASE0)[:2] + ["[pwd()]"]))
    assert [v.passed for v in trace.verdicts] == [True]
    assert progress_reward(trace) == envtuning_scores(trace).progress == 0.25
    half = play(BASE0, perfect(BASE0)[:4])  # an unfinished record: the same rule
    assert progress_reward(half) == 0.5
    # A force-terminated episode: the environment fails every remaining turn, same denominator.
    timeout = play(BASE0, perfect(BASE0)[:2] + ["[pwd()]"] * 3, BfclEnvConfig(max_steps_per_turn=2))
    assert len(timeout.verdicts) == 4 and progress_reward(timeout) == 0.25


def test_agent_reward_on_a_cut_off_episode():
    played = play(BASE0, perfect(BASE0)[:2] + ["[pwd()]"])
    trace = cut_off(played)
    reward = agent_reward(trace)
    assert reward.components["completion"] == 0.25  # unreached turns failed
    assert reward.components["timing"] == 0.5  # turns 0 and 1 timed right, 2 and 3 unreached
    assert reward.penalties["timeout"] == 1  # running out of context is an early end too
    assert agent_reward(played).penalties["timeout"] == 0
    assert agent_reward(trace).total == pytest.approx(agent_reward(played).total - 0.5)
    entry = agent_reward(trace, AgentRewardConfig(completion_mode="entry"))
    assert entry.components["completion"] == 0.0  # an unreached turn fails the entry
    config = ShapingConfig(turn_passed=1.0, timeout=-1.0)
    assert step_rewards(trace, config) == pytest.approx([0.0, 1.0, -1.0])  # on the last message
    assert step_rewards(played, config) == pytest.approx([0.0, 1.0, 0.0])


def test_agent_reward_defaults_are_the_designs():
    c = AgentRewardConfig()
    assert (c.tool_accuracy_weight, c.efficiency_weight, c.timing_weight) == (0.25, 0.15, 0.10)
    assert (c.wrong_tool_penalty, c.redundant_call_penalty) == (0.3, 0.2)
    assert c.unexpected_call_accuracy == 0.5
    weights = (c.completion_weight, c.tool_accuracy_weight, c.efficiency_weight, c.timing_weight,
               c.format_weight)
    assert sum(weights) == pytest.approx(1.0)  # a perfect episode scores 1
    # One wrong tool in an otherwise perfect episode costs its tool accuracy, efficiency and 0.3.
    messages = ["[pwd(), " + calls(BASE0, 0)[1:], "ok"] + perfect(BASE0)[2:]
    reward = agent_reward(play(BASE0, messages))
    expected = (0.4 + 0.25 * (20 / 21) + 0.15 * (10 / 11) + 0.10 + 0.1) - 0.3
    assert reward.total == pytest.approx(expected)
    # Redundant calls cost 0.2 each (two here, see the test above).
    messages = ["[cd(folder='document'), cd(folder='document')]", "[mkdir(dir_name='temp')]",
                "[mkdir(dir_name='temp')]"]
    reward = agent_reward(play(BASE0, messages))
    assert reward.penalties["redundant_call"] == 2
    with pytest.raises(ValueError, match="unexpected_call_accuracy"):
        AgentRewardConfig(unexpected_call_accuracy=1.5)


def test_tool_accuracy_when_no_tool_was_expected():
    pwd = ToolCall("pwd", {})
    step = StepResult(0, StepCode.CLEAN_CALL, (), (pwd,), (ExecutionResult(pwd, "/"),))
    called = EpisodeTrace("no-call task", (step,), (), ((),))
    assert agent_reward(called).components["tool_accuracy"] == 0.5
    assert agent_reward(called, AgentRewardConfig(unexpected_call_accuracy=0.0)).components[
        "tool_accuracy"] == 0.0
    quiet = EpisodeTrace("no-call task", (StepResult(0, StepCode.NO_CALL, ()),), (), ((),))
    assert agent_reward(quiet).components["tool_accuracy"] == 1.0
