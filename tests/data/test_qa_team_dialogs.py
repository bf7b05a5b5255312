"""The oracle team's dialogs (the SFT warm-up of multi-agent QA runs): one delegation per hop and
an exact match on world questions, token for token what a team rollout of the same replies
trains on, and the qa_team source's config errors."""

import dataclasses

import pytest

from seetjax.config.sections import load_config_file
from seetjax.data.formatter import format_dialogs
from seetjax.data.qa_dialogs import oracle_dialogs
from seetjax.envs.qa_search.run import QASearchRunConfig, load_tasks
from seetjax.eval.evaluate import EVAL_STAGE
from seetjax.rewards import RewardConfig
from seetjax.rl.config import build_plan
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import RolloutConfig
from seetjax.rollout.multi_agent import MultiAgentConfig, MultiAgentRollout
from tests.rollout.scripted import ScriptedPolicy

SECTION = QASearchRunConfig(world_passages=40, min_hops=1, max_hops=3, snippet_words=20,
                            default_k=2)
ROUNDS = 4  # three delegations, then the answer


def replies(dialog):
    return [m["content"] for m in dialog.messages if m["role"] == "assistant"]


def replay(tokenizer, dialogs):
    """One question's team rollout whose coordinator and workers reply as its dialogs do."""
    coordinator = replies(dialogs[0])
    workers = [r for d in dialogs[1:] for r in replies(d)]
    rollout = MultiAgentRollout(
        tokenizer, RolloutConfig(group_size=1, env=SECTION, reward=RewardConfig("env"),
                                 limits=EpisodeLimits(64, 512, 1024, 4096)),
        MultiAgentConfig(True, ROUNDS))
    policy = {"coordinator": ScriptedPolicy(tokenizer, lambda row: coordinator.pop(0)),
              "worker": ScriptedPolicy(tokenizer, lambda row: workers.pop(0))}
    task_id = dialogs[0].metadata["task_id"]
    task = next(t for t in _tasks() if t.id == task_id)
    return task, rollout([task], policy, EVAL_STAGE, progress=1.0, step=0, seed=0)


def test_the_oracle_team_delegates_each_hop_once_and_answers_exactly(tokenizer):
    dialogs, failed = oracle_dialogs(SECTION, "train", 6, max_rounds=ROUNDS)
    assert not failed
    coordinators = [d for d in dialogs if d.metadata["role"] == "coordinator"]
    assert len(coordinators) == 6 and {d.metadata["hops"] for d in coordinators} >= {1, 2, 3}
    for d in coordinators:
        members = [x for x in dialogs if x.metadata["task_id"] == d.metadata["task_id"]]
        task, result = replay(tokenizer, members)
        team = result.teams[0]
        assert team.env.delegations == [h.question for h in task.hops]
        assert replies(d)[-1] == f"[answer(text={task.answers[0]!r})]"
        assert [w.env.search_tools.searches for w in team.workers] == [1] * task.num_hops
        stats = result.stats()
        assert stats["coordinator_exact_match"] == 1.0 and stats["worker_sub_answer_em"] == 1.0
        assert stats["coordinator_format_validity"] == stats["worker_format_validity"] == 1.0
        assert stats["coordinator_rounds"] == task.num_hops + 1


def test_a_spaced_oracle_team_passes_the_spaced_answer_on():
    spaced = dataclasses.replace(SECTION, oracle_spaced_answer=True)
    dialogs, failed = oracle_dialogs(spaced, "train", 4, max_rounds=ROUNDS)
    assert not failed
    for d in dialogs:
        task = next(t for t in _tasks() if t.id == d.metadata["task_id"])
        if d.metadata["role"] == "coordinator":
            assert replies(d)[-1] == f"[answer(text={' ' + task.answers[0]!r})]"
        else:
            hop = task.hops[d.metadata["round"]]
            assert replies(d)[-1] == f"[answer(text={' ' + hop.answer!r})]"


def test_team_dialogs_are_what_team_rollouts_train_on(tokenizer):
    dialogs, _ = oracle_dialogs(SECTION, "train", 3, max_rounds=ROUNDS)
    for task in _tasks()[:3]:
        members = [d for d in dialogs if d.metadata["task_id"] == task.id]
        examples, _ = format_dialogs(members, tokenizer, 4096, True)
        _, result = replay(tokenizer, members)
        assert len(examples) == len(result.episodes) == task.num_hops + 1
        for example, episode in zip(examples, result.episodes):  # the coordinator's first
            ids, mask, _ = episode.conversation.training_arrays()
            # the template's newline after the last reply's end token is the dialog's, untrained
            n = len(ids)
            assert list(example.tokens[:n]) == list(ids) and len(example.tokens) == n + 1
            assert list(example.loss_mask) == [int(m) for m in mask] + [0]


def test_the_qa_team_source_is_validated_with_its_field_named():
    from seetjax.sft.config import validate
    config = load_config_file("configs/qa_multi_agent.py")
    assert build_plan(config).multi_agent.max_rounds == 3
    sft = config.sft.run
    assert sft.data.source == "qa_team" and sft.data.multi_agent.max_rounds == 3
    config.multi_agent.max_rounds = 2  # the run's section is the source's
    with pytest.raises(ValueError, match=r"config\.sft\.run: config\.data\.multi_agent\."
                                         r"max_rounds=2: .* needs >= 3"):
        build_plan(config)
    config.env.max_hops = 1
    validate(sft)
    for name, value, message in (
            ("max_rounds", 0, r"config\.data\.multi_agent: MultiAgentConfig\.max_rounds=0"),
            ("rounds", 2, r"config\.data\.multi_agent\.rounds=2: unknown field\(s\) \['rounds'\]")):
        bad = load_config_file("configs/qa_multi_agent.py").sft.run
        bad.data.multi_agent[name] = value
        with pytest.raises(ValueError, match=message):
            validate(bad)
    sft.data.source = "qa_teams"
    with pytest.raises(ValueError, match=r"config\.data\.source='qa_teams': one of .*qa_team"):
        validate(sft)


def _tasks():
    return load_tasks(SECTION, {}, "train", 6)
