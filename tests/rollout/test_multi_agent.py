"""Multi-agent QA rollouts with scripted policies: credits per role on hand-checked cases, the
round cap, each agent's own row and loss mask, and the config's errors. No model needed."""

import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.batch import row_mask
from seetjax.config.sections import load_config_file
from seetjax.envs.qa_search.run import QASearchRunConfig
from seetjax.envs.qa_search.world import World
from seetjax.losses.advantages import GRPOAdvantageConfig, grpo_advantages
from seetjax.rewards import RewardConfig
from seetjax.rl.config import build_plan
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.coordinator import COORDINATOR_ROLE, WORKER_ROLE
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import RolloutConfig
from seetjax.rollout.multi_agent import MultiAgentConfig, MultiAgentRollout
from seetjax.sampling import Completion
from seetjax.seet.config import default_stages

PLAIN = default_stages()[3]
# team = 1.0 EM + 0.1 format - 0.1 per worker search - 0.5 on a timeout
SECTION = QASearchRunConfig(world_passages=40, min_hops=2, max_hops=2, em_weight=1.0,
                            f1_weight=0.0, format_weight=0.1, search_cost=0.1,
                            timeout_penalty=0.5, search_budget=2, default_k=2, max_k=3)


class RolePolicy:
    """Replies by role (read from the sequence's system prompt) and by what its context shows:
    respond(role, context_text) -> reply text."""

    def __init__(self, tokenizer, respond):
        self.tokenizer, self.respond = tokenizer, respond

    def start(self, prompts):
        self.contexts = [list(p) for p in prompts]

    def generate(self, rows, chunks, max_new_tokens):
        out = []
        for row, chunk, limit in zip(rows, chunks, max_new_tokens):
            self.contexts[row] += chunk
            text = self.tokenizer.decode(self.contexts[row])
            role = "coordinator" if COORDINATOR_ROLE in text else "worker"
            ids = (self.tokenizer.encode(self.respond(role, text))
                   + [self.tokenizer.reply_end_id])[:limit]
            self.contexts[row] += ids
            out.append(Completion(ids, [0.0] * len(ids), "stop"))
        return out


@pytest.fixture(scope="module")
def task():
    return World(SECTION.world).questions("train", 1)[0]


def oracle(task, wrong_first_worker=False, always_delegate=False):
    """The coordinator delegates each hop's sub-question, then answers; a worker searches its
    question once, then answers its hop's answer (the first worker wrongly, if asked)."""
    answers = {h.question: h.answer for h in task.hops}

    def respond(role, text):
        if role == "coordinator":
            asked = text.count("Worker:") + text.count("gave no answer")
            if always_delegate or asked < len(task.hops):
                return f"[delegate(question={task.hops[asked % len(task.hops)].question!r})]"
            return f"[answer(text={task.answers[0]!r})]"
        question = next(q for q in answers if q in text)
        if "Search 1 of" not in text:
            return f"[search(query={question!r})]"
        wrong = wrong_first_worker and question == task.hops[0].question
        return f"[answer(text={'nobody' if wrong else answers[question]!r})]"

    return respond


def play(tokenizer, task, respond, max_rounds=3, weight=0.5, group_size=1, episode_tokens=2048):
    config = RolloutConfig(group_size=group_size, env=SECTION, reward=RewardConfig("env"),
                           limits=EpisodeLimits(48, 400, 256, episode_tokens))
    rollout = MultiAgentRollout(tokenizer, config, MultiAgentConfig(True, max_rounds, weight))
    return rollout([task], RolePolicy(tokenizer, respond), PLAIN, 1.0, 0, seed=0)


def test_an_oracle_team_earns_the_team_reward_and_each_worker_its_bonus(tokenizer, task):
    assert task.num_hops == 2
    result = play(tokenizer, task, oracle(task))
    team = result.teams[0]
    assert team.env.delegations == [h.question for h in task.hops]
    assert team.env.answered == task.answers[0] and team.env.worker_searches == 2
    # coordinator: 1 + 0.1 - 2 x 0.1 = 0.9; each worker: 0.9 + 0.5 x 1
    np.testing.assert_allclose(result.rewards(), [0.9, 1.4, 1.4], atol=1e-6)
    stats = result.stats()
    assert stats["coordinator_reward"] == pytest.approx(0.9)
    assert stats["worker_reward"] == pytest.approx(1.4)
    assert stats["coordinator_exact_match"] == 1.0 and stats["coordinator_rounds"] == 3
    assert stats["worker_per_team"] == 2 and stats["worker_sub_answer_em"] == 1.0
    assert stats["worker_searches"] == 1.0 and stats["coordinator_format_validity"] == 1.0
    assert stats["reward"] == pytest.approx((0.9 + 1.4 + 1.4) / 3)


def test_a_wrong_sub_answer_loses_only_that_workers_bonus(tokenizer, task):
    result = play(tokenizer, task, oracle(task, wrong_first_worker=True), weight=0.25)
    np.testing.assert_allclose(result.rewards(), [0.9, 0.9, 1.15], atol=1e-6)
    assert result.stats()["worker_sub_answer_em"] == 0.5


def test_the_round_cap_ends_a_coordinator_that_never_answers(tokenizer, task):
    result = play(tokenizer, task, oracle(task, always_delegate=True), max_rounds=2)
    team = result.teams[0]
    assert len(team.env.trace().steps) == 2 and len(team.workers) == 1
    assert team.env.timeout and team.env.answered is None
    # no answer, one worker search, the timeout: -0.1 - 0.5; the worker adds its correct hop
    np.testing.assert_allclose(result.rewards(), [-0.6, -0.1], atol=1e-6)
    one = play(tokenizer, task, oracle(task, always_delegate=True), max_rounds=1)
    assert one.teams[0].workers == [] and one.teams[0].env.timeout


def test_each_agent_trains_on_its_own_replies_only(tokenizer, task):
    result = play(tokenizer, task, oracle(task), group_size=2)
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id, row_multiple=4)
    tokens = np.asarray(batch.sequences.tokens)
    mask = np.asarray(batch.sequences.loss_mask)
    episodes = result.episodes
    assert len(episodes) == 2 + 4 and tokens.shape[0] == 8
    roles = ["coordinator"] * 2 + ["worker"] * 4
    for row, (episode, role) in enumerate(zip(episodes, roles)):
        segments = episode.conversation.segments
        prompt = tokenizer.decode(segments[0].ids)
        assert (COORDINATOR_ROLE in prompt) == (role == "coordinator")
        assert (WORKER_ROLE in prompt) == (role == "worker")
        trained = tokens[row][mask[row] > 0].tolist()
        assert trained == [t for s in segments if s.kind == "reply" for t in s.ids]
        text = tokenizer.decode(trained)
        # the coordinator's loss never falls on a worker's search, a worker's never on a
        # delegation; the worker's answer shown to the coordinator carries no loss there
        assert ("search(" in text) == (role == "worker")
        assert ("delegate(" in text) == (role == "coordinator")
    assert mask[6:].sum() == 0  # padding rows
    np.testing.assert_allclose(np.asarray(batch.rewards)[:6], [0.9, 0.9] + [1.4] * 4, atol=1e-6)
    groups = np.asarray(batch.group_ids)[:6]  # workers: team 0's two hops, then team 1's
    assert groups[0] == groups[1] and len(set(groups[2:])) == 2 and groups[0] not in groups[2:]


def test_workers_are_grouped_by_the_hop_they_answer(tokenizer, task):
    """Hop 0 answered right by every team's worker, hop 1 wrong by every one: within each hop
    the workers earn the same credit, so a group baseline has nothing to learn from them."""
    first = task.hops[0].question
    wrong_second = oracle(task)

    def respond(role, text):  # every worker on the second hop answers it wrongly
        reply = wrong_second(role, text)
        return reply if role == "coordinator" or first in text or "search(" in reply else \
            "[answer(text='nobody')]"

    result = play(tokenizer, task, respond, group_size=2)
    workers = result.episodes[2:]
    assert [w.task_id for w in workers] == [f"{task.id}/worker/hop{h}" for h in (0, 1, 0, 1)]
    credits = result.rewards()[2:]
    assert credits[0] == credits[2] > credits[1] == credits[3]  # two hops, two difficulties
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    groups = np.asarray(batch.group_ids)[2:6]
    assert groups[0] == groups[2] != groups[1] == groups[3]
    advantages, _ = grpo_advantages(*map(jnp.asarray, (
        batch.token_rewards, batch.reward_mask, batch.group_ids, row_mask(batch.sequences))),
        GRPOAdvantageConfig())
    assert not np.asarray(advantages)[2:6].any()


def test_a_worker_answers_the_hop_of_its_delegation_not_of_its_round(tokenizer, task):
    """A coordinator whose first reply is malformed delegates hop 0 in round 1: that worker is
    scored and grouped on hop 0, as its credit is."""
    oracle_reply = oracle(task)

    def respond(role, text):
        stumbled = role == "coordinator" and "Error:" not in text
        return "[delegate(question=" if stumbled else oracle_reply(role, text)

    result = play(tokenizer, task, respond, max_rounds=4)
    team = result.teams[0]
    assert team.env.format_errors == 1 and len(team.workers) == 2
    for hop, worker in zip(task.hops, team.workers):
        assert worker.task.hops == (hop,) and worker.turns[0].passed


def test_a_coordinator_over_the_token_cap_is_left_out_and_counted(tokenizer, task):
    result = play(tokenizer, task, oracle(task), group_size=2, episode_tokens=300)
    assert len(result.teams[0].coordinator.prompt) > 300
    assert result.episodes == [] and result.over_token_cap == 2
    assert all(t.workers == [] and t.coordinator.truncated for t in result.teams)
    coordinators = result.by_role()["coordinator"]
    assert coordinators.episodes == [] and coordinators.over_token_cap == 2
    assert result.stats()["episodes_over_token_cap"] == 2.0
    batch = trajectory_batch(coordinators, pad_id=tokenizer.pad_id)
    assert batch.sequences.tokens.shape[0] == 2 and not np.asarray(row_mask(batch.sequences)).any()


def test_the_config_names_the_field_it_rejects():
    for bad, field in ((dict(max_rounds=0), "max_rounds"), (dict(sub_answer_weight=-1.0),
                                                            "sub_answer_weight"),
                       (dict(enabled="yes"), "enabled")):
        with pytest.raises(ValueError, match=field):
            MultiAgentConfig(**bad)
    config = load_config_file("configs/qa_multi_agent.py")
    assert build_plan(config).multi_agent == MultiAgentConfig(True, 3, 0.5)
    config.multi_agent.max_rounds = 0
    with pytest.raises(ValueError, match=r"config\.multi_agent: MultiAgentConfig\.max_rounds=0"):
        build_plan(config)
    config.multi_agent.max_rounds, config.reward.kind = 2, "progress"
    with pytest.raises(ValueError, match=r"config\.reward\.kind='progress'"):
        build_plan(config)
    single = load_config_file("configs/qa_search.py")
    assert build_plan(single).multi_agent is None
    single.multi_agent.enabled, single.multi_agent.rounds = True, 2
    with pytest.raises(ValueError, match=r"config\.multi_agent\.rounds=.*: unknown field\(s\) \['rounds'\]"):
        build_plan(single)
