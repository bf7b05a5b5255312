"""A parameter set per role (`multi_agent.separate_params`, seetjax.rl.policy_states): each role's
replies sampled with its own policy, each set updated on its own role's rows only (the trainer's
`_learn` on scripted team rollouts, a tiny random model on the embedded tokenizer learning),
checkpoints holding both sets exactly, and the config's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs.qa_search.world import World
from seetjax.learner import create_learner
from seetjax.learner.checkpoint import Checkpointer
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rewards import RewardConfig
from seetjax.rl.config import build_plan
from seetjax.rl.policy_states import PolicyStates
from seetjax.rl.trainer import TrainRun
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import RolloutConfig
from seetjax.rollout.multi_agent import ROLES, MultiAgentConfig, MultiAgentRollout
from seetjax.runtime.sharding import make_mesh
from tests.rollout.test_multi_agent import PLAIN, SECTION, RolePolicy, oracle, play


@pytest.fixture(scope="module")
def task():
    return World(SECTION.world).questions("train", 1)[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer):
    """A TrainRun of configs/qa_multi_agent.py with separate parameter sets, set up only as far
    as `_learn` needs (its plan and tokenizer; each test gives it fresh `policies`)."""
    config = load_config_file("configs/qa_multi_agent.py")
    config.multi_agent.separate_params = True
    config.sft.enabled = False
    config.learner.micro_batches = 1
    config.learner.optimizer.warmup_steps = 0  # the warmup's first step has lr 0: nothing moves
    config.data.tasks_per_step = 1  # the update's rows: the tests' one question's teams
    run = TrainRun(config, tmp_path_factory.mktemp("run"))
    run.tokenizer = tokenizer
    return run


@pytest.fixture(scope="module")
def initial(run, small_dir):
    """(learner, initial state) of a tiny random model on the embedded tokenizer, one device."""
    return create_learner(load_hf_checkpoint(small_dir), run.plan.learner,
                          mesh=make_mesh(1, 1, 1, jax.devices()[:1]))


def fresh(run, initial) -> PolicyStates:
    learner, state = initial
    run.policies = PolicyStates(learner, jax.tree.map(jnp.copy, state), run.plan.param_roles)
    return run.policies


def host(tree):
    return jax.tree.map(np.asarray, jax.device_get(tree))


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def scripted(task, coordinator_answers_first=False, first_worker_wrong=False):
    """The oracle team (`oracle`), except that the first coordinator reply of the batch answers
    at once (that team has no workers: credit 1.1 vs 0.9) and/or the first worker answer is
    wrong (that worker loses its bonus: 0.9 vs 1.4)."""
    base, first = oracle(task), {"coordinator": coordinator_answers_first,
                                 "worker": first_worker_wrong}

    def respond(role, text):
        reply = base(role, text)
        if role == "worker" and not reply.startswith("[answer("):
            return reply
        if first[role]:
            first[role] = False
            return (f"[answer(text={task.answers[0]!r})]" if role == "coordinator"
                    else "[answer(text='nobody')]")
        return reply

    return respond


def test_each_role_is_sampled_by_its_own_policy(tokenizer, task):
    seen = {role: [] for role in ROLES}

    def policy(own):
        respond = oracle(task)
        return RolePolicy(tokenizer, lambda role, text: seen[own].append(role) or
                          respond(role, text))

    config = RolloutConfig(group_size=2, env=SECTION, reward=RewardConfig("env"),
                           limits=EpisodeLimits(48, 400, 256, 2048))
    rollout = MultiAgentRollout(tokenizer, config, MultiAgentConfig(True, separate_params=True))
    result = rollout([task], {role: policy(role) for role in ROLES}, PLAIN, 1.0, 0, seed=0)
    assert len(result.teams[0].workers) == 2
    assert set(seen["coordinator"]) == {"coordinator"} and set(seen["worker"]) == {"worker"}
    assert len(seen["coordinator"]) == 2 * 3  # two teams, three replies each


@pytest.mark.parametrize("moving", ROLES)
def test_only_the_role_whose_rows_have_signal_changes(tokenizer, task, run, initial, moving):
    still = next(r for r in ROLES if r != moving)
    result = play(tokenizer, task, scripted(task, coordinator_answers_first=moving == ROLES[0],
                                            first_worker_wrong=moving == ROLES[1]), group_size=2)
    parts = result.by_role()
    assert len(set(parts[moving].rewards().tolist())) == 2  # GRPO's signal in one role only
    assert len(set(parts[still].rewards().tolist())) == 1
    policies = fresh(run, initial)
    before = host(policies.states)
    learned, counts, _ = run._learn(result, step=0)
    assert np.isfinite(learned[f"{moving}_loss"]) and learned[f"{still}_no_signal"] == 1.0
    assert not any(k.startswith(still) and k != f"{still}_no_signal" for k in learned)
    assert "loss" not in learned and counts == {"records_available": 0.0, "records_trained": 0.0}
    after = host(policies.states)
    assert same(after[still], before[still])  # params, optimizer state, step: untouched
    assert not same(after[moving].params, before[moving].params)
    assert int(after[moving].step) == 1 and int(after[still].step) == 0
    # the next rollout samples each role with its own set
    made = policies.rollout_policy(lambda params, key, version: (params, version),
                                   jax.random.key(0))
    assert made[moving][1] == 1 and made[still][1] == 0  # each set's own weight version
    sampled = {role: params for role, (params, _) in made.items()}
    assert same(host(sampled[moving]), host(policies.learner.sampling_params(
        policies.states[moving])))
    assert not same(host(sampled[moving]), host(sampled[still]))


def test_a_roles_rows_never_reach_the_other_roles_gradient(tokenizer, task, run, initial):
    # three teams: the first answers at once, the others' first workers (hop 0) differ
    result = play(tokenizer, task, scripted(task, coordinator_answers_first=True,
                                            first_worker_wrong=True), group_size=3)
    policies = fresh(run, initial)
    coordinators = [t.coordinator for t in result.teams]
    workers = [w for t in result.teams for w in t.workers]
    parts = policies.parts(result)
    assert parts["coordinator"].episodes == coordinators and parts["worker"].episodes == workers

    def gradients(role):
        batch = run._batch(policies.parts(result)[role], step=0)
        return host(policies.learner.gradients(policies.state(role), batch)[0])

    for role, episodes in (("worker", workers), ("coordinator", coordinators)):
        other = next(r for r in ROLES if r != role)
        grads = {r: gradients(r) for r in ROLES}
        assert any(np.abs(g).max() > 0 for g in jax.tree.leaves(grads[other]))
        for i, e in enumerate(episodes):  # new credits for every episode of `role`...
            e.env.credit = dict(e.env.credit, total=3.0 * i - 1.0)
        assert not same(gradients(role), grads[role])
        assert same(gradients(other), grads[other])  # ...leave the other set's gradient as is


def test_a_checkpoint_restores_both_sets_exactly(tokenizer, task, run, initial, tmp_path):
    result = play(tokenizer, task, scripted(task, coordinator_answers_first=True,
                                            first_worker_wrong=True), group_size=3)
    policies = fresh(run, initial)
    learned, _, _ = run._learn(result, step=0)
    assert {"coordinator_loss", "worker_loss"} <= set(learned)
    saved = host(policies.states)
    assert not same(saved["coordinator"].params, saved["worker"].params)
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(1, policies.checkpointed, caller_state={"step": 1})
    checkpointer.wait()
    restored = fresh(run, initial)
    states, caller, step = checkpointer.restore_intact(restored.checkpointed)
    restored.restore(states)
    assert step == 1 and caller == {"step": 1}
    for role in ROLES:
        for name in ("params", "opt_state", "step", "rng", "skipped"):
            assert same(host(getattr(restored.states[role], name)),
                        getattr(saved[role], name)), (role, name)


def test_separate_params_needs_a_team():
    for path in ("configs/qa_search.py", "configs/tiny.py"):
        config = load_config_file(path)
        assert build_plan(config).param_roles == ()
        config.multi_agent.separate_params = True
        with pytest.raises(ValueError, match=r"config\.multi_agent\.separate_params=True"):
            build_plan(config)
    team = load_config_file("configs/qa_multi_agent.py")
    assert build_plan(team).param_roles == ()
    with pytest.raises(ValueError, match=r"separate_params='yes': must be True or False"):
        MultiAgentConfig(True, separate_params="yes")
    team.multi_agent.separate_params = True
    assert build_plan(team).param_roles == ROLES
