"""The oracle's QA search dialogs (the SFT warm-up of qa_search runs) are valid, pass, and are
token for token what a rollout of the oracle trains on."""

import dataclasses

import pytest

from seetjax.data.dialogs import Dialog
from seetjax.data.formatter import format_dialogs
from seetjax.data.qa_dialogs import oracle_dialogs
from seetjax.envs.qa_search.env import gold_calls
from seetjax.envs.qa_search.oracle import render_call
from seetjax.envs.qa_search.run import QASearchRunConfig
from seetjax.eval.evaluate import EVAL_STAGE
from seetjax.rewards import RewardConfig
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from tests.rollout.scripted import ScriptedPolicy

SECTION = QASearchRunConfig(world_passages=40, max_hops=3, snippet_words=20, default_k=2)


def test_oracle_dialogs_are_valid_and_each_search_is_a_hop():
    dialogs, failed = oracle_dialogs(SECTION, "train", 6)
    assert len(dialogs) == 6 and not failed
    for d in dialogs:
        Dialog.from_json(d.to_json())  # validates
        replies = [m["content"] for m in d.messages if m["role"] == "assistant"]
        assert len(replies) == d.metadata["hops"] + 1
        assert all(r.startswith("[search(") for r in replies[:-1])
        assert replies[-1].startswith("[answer(")


def test_a_rechecking_oracle_dialog_searches_the_last_hop_twice():
    section = dataclasses.replace(SECTION, oracle_recheck=1.0)
    dialogs, failed = oracle_dialogs(section, "train", 4)
    assert len(dialogs) == 4 and not failed
    for d in dialogs:
        replies = [m["content"] for m in d.messages if m["role"] == "assistant"]
        assert len(replies) == d.metadata["hops"] + 2 and replies[-3] == replies[-2]
        assert replies[-2].startswith("[search(") and replies[-1].startswith("[answer(")


def test_oracle_dialogs_are_what_rollouts_train_on(tokenizer):
    dialogs, _ = oracle_dialogs(SECTION, "train", 4)
    examples, _ = format_dialogs(dialogs, tokenizer, 4096, True)
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1, env=SECTION,
                                               limits=EpisodeLimits(64, 512, 1024, 4096),
                                               reward=RewardConfig("env")))
    tasks = _tasks(4)
    scripts = [[render_call(c, "python") for c in gold_calls(t)] for t in tasks]
    policy = ScriptedPolicy(tokenizer, lambda row: scripts[row].pop(0))
    result = rollout(tasks, policy, EVAL_STAGE, progress=1.0, step=0, seed=0)
    for example, episode in zip(examples, result.episodes):
        ids, mask, _ = episode.conversation.training_arrays()
        # the template's newline after the last reply's end token is the dialog's, untrained
        n = len(ids)
        assert list(example.tokens[:n]) == list(ids) and len(example.tokens) == n + 1
        assert list(example.loss_mask) == [int(m) for m in mask] + [0]
    stats = result.stats()
    assert stats["env_exact_match"] == 1.0 and stats["env_format"] == 1.0
    assert stats["reward"] == pytest.approx(stats["env_total"])  # f32 returns


def _tasks(n):
    from seetjax.envs.qa_search.run import load_tasks
    return load_tasks(SECTION, {}, "train", n)
