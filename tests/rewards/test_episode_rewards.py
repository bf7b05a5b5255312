"""The trained reward (`Episode.progress_reward`) is the library's on SEET episodes played from
scripts, cut-off episodes included, and agrees with the episode's own turn log."""

import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.rewards import agent_reward, progress_reward
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.seet.config import StageConfig
from tests.rollout.scripted import ScriptedPolicy

TASK = load_tasks("base")[0]  # 4 turns, every one expects calls
STANDARD = StageConfig(stage=4, env_mode="standard", retry_budget=0, retry_probability_start=0.0,
                       retry_probability_end=0.0)
AUGMENTED = StageConfig(stage=1, env_mode="augmented", retry_budget=1)


def calls(turn):
    return "[" + ", ".join(c.to_python() for c in TASK.ground_truth[turn]) + "]"


PERFECT = [m for t in range(TASK.num_turns) for m in (calls(t), "Done.")]

# name: (stage, replies, env config, limits, expected progress)
SCRIPTS = {
    "perfect": (STANDARD, PERFECT, {}, {}, 1.0),
    "half": (STANDARD, PERFECT[:4] + ["Done."] * 4, {}, {}, 0.5),
    "retried format error": (AUGMENTED, ["[cd(folder="] + PERFECT, {}, {}, 1.0),
    "force-terminated": (STANDARD, PERFECT[:2] + ["[pwd()]"] * 10,
                         {"max_steps_per_turn": 2}, {}, 0.25),
    "turn token cap": (STANDARD, PERFECT[:2] + ["[pwd()]"] * 50, {},
                       {"max_turn_tokens": 40}, None),
    # The context fills up in turn 1 after turn 0 passed: 1 of 4 turns, the rest never reached.
    "cut off": (STANDARD, PERFECT[:2] + ["[pwd()]"] * 300, {},
                {"max_turn_tokens": 10_000, "max_episode_tokens": 1200}, 0.25),
}


@pytest.fixture(scope="module")
def episodes(tokenizer):
    out = {}
    for name, (stage, replies, env, limits, _) in SCRIPTS.items():
        rollout = Rollout(tokenizer, RolloutConfig(
            group_size=1, env=BfclEnvConfig(prompt_style="compact", **env),
            limits=EpisodeLimits(**limits)))
        (episode,) = rollout.episodes([TASK], stage, progress=0.0, seed=0)
        queue = list(replies)
        rollout.play([episode], ScriptedPolicy(
            tokenizer, lambda row, queue=queue: queue.pop(0) if queue else "Done."))
        out[name] = episode
    return out


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_trained_reward_is_the_librarys(episodes, name):
    episode, expected = episodes[name], SCRIPTS[name][-1]
    trace = episode.trace()
    assert trace.truncated == episode.truncated == (name == "cut off")
    from_log = sum(bool(t.passed) for t in episode.turns) / TASK.num_turns
    assert episode.progress_reward() == progress_reward(trace) == pytest.approx(from_log)
    assert agent_reward(trace).components["completion"] == episode.progress_reward()
    if expected is not None:
        assert episode.progress_reward() == pytest.approx(expected)


def test_a_cut_off_episode_is_penalised_like_a_timeout(episodes):
    cut = episodes["cut off"]
    assert cut.turns[0].passed and cut.truncated
    assert len(cut.trace().verdicts) < TASK.num_turns  # the turns never reached have no verdict
    assert agent_reward(cut.trace()).penalties["timeout"] == 1
    assert agent_reward(cut.env.trace()).penalties["timeout"] == 0  # the env cannot know
    assert agent_reward(episodes["force-terminated"].trace()).penalties["timeout"] == 1
    assert agent_reward(episodes["perfect"].trace()).penalties["timeout"] == 0
