"""Scripted SEET episodes on BFCL tasks: no model needed."""

import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from tests.rollout.scripted import ScriptedPolicy


@pytest.fixture(scope="session")
def task():
    """multi_turn_base_0: turn 0 is cd(document), mkdir(temp), mv(final_report.pdf, temp)."""
    return load_tasks("base")[0]


def calls_text(calls):
    return "[" + ", ".join(c.to_python() for c in calls) + "]"


@pytest.fixture
def play(tokenizer):
    """play(tasks, stage, scripts, group_size=1, limits=None, rollout=None) -> (rollout, episodes):
    scripts[row] is a list of replies, "Done." once it runs out."""

    def run(tasks, stage, scripts, group_size=1, limits=None, rollout=None):
        rollout = rollout or Rollout(tokenizer, RolloutConfig(
            group_size=group_size, env=BfclEnvConfig(prompt_style="compact"),
            limits=limits or EpisodeLimits()))
        episodes = rollout.episodes(tasks, stage, progress=0.0, seed=0)
        queues = [list(s) for s in scripts]
        policy = ScriptedPolicy(tokenizer, lambda row: queues[row].pop(0) if queues[row]
                                else "Done.")
        rollout.play(episodes, policy)
        return rollout, episodes

    return run
