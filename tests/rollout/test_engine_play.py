"""Rollouts through the serving engine (`RolloutConfig.mode="engine"`, `engine_play.py`): the
same episodes as the lock-step `SamplerPolicy` greedily, every token's log-prob and weight
version, the learner's log-probs on engine-played rows, seeded episodes whoever shares the
engine, prefix reuse of each episode's conversation, and the configs refused."""

import jax
import numpy as np
import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.branching import BranchConfig
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.sampling import Sampler, SamplingParams
from seetjax.seet.config import default_stages
from seetjax.serving.engine import Engine
from seetjax.serving.rollout_policy import EnginePolicy
from tests.learner.learner_testlib import make_learner

COMPACT = BfclEnvConfig(prompt_style="compact")
# The random model's replies are seldom calls: long ones are refused as format errors here, so
# SEET's fast loop retries them (with hints) greedily too.
STRICT = BfclEnvConfig(prompt_style="compact", max_message_chars=12)
GREEDY, T1 = SamplingParams(temperature=0.0), SamplingParams(temperature=1.0)
# Short replies cut most replies off (closed with a stop token, in the engine's context too).
LIMITS = EpisodeLimits(max_reply_tokens=6, max_turn_tokens=18, max_episode_tokens=1536)


@pytest.fixture(scope="module")
def setup(embedded_dir, tokenizer):
    """(learner, state, sampler, engine): the embedded default (random, f32) as the learner
    scores it, sampled by the lock-step sampler and by one engine (4 rows, 8-step chunks)."""
    learner, state = make_learner(load_hf_checkpoint(embedded_dir),
                                  {"algorithm": "grpo", "temperature": 1.0})
    model = learner.model(state)
    sampler = Sampler(model, pad_id=tokenizer.pad_id)
    engine = Engine(model, tokenizer, params=learner.sampling_params(state), sampler=sampler,
                    max_batch=4, max_queue=2, chunk_steps=8, max_context=2048)
    with engine:
        yield learner, state, sampler, engine


def _play(tokenizer, setup, mode, tasks, stage, sampling=GREEDY, seed=0, env=STRICT):
    _, _, sampler, engine = setup
    rollout = Rollout(tokenizer, RolloutConfig(group_size=2, env=env, limits=LIMITS, mode=mode))
    if mode == "engine":
        policy = EnginePolicy(engine, sampling, seed)
    else:
        policy = SamplerPolicy(sampler, engine.params, sampling, tokenizer.stop_ids,
                               jax.random.key(seed), version=engine.weight_version)
    return rollout(tasks, policy, stage, progress=0.0, step=0, seed=0)


@pytest.mark.parametrize("stage", [1, 2])  # stage 2: interception and retries; stage 3: retries
def test_greedy_episodes_are_the_lock_step_ones_token_for_token(tokenizer, setup, stage):
    stage = default_stages()[stage]
    tasks = list(load_tasks("base")[:2])
    engine = setup[3]
    before = engine.stats.prompt_tokens - engine.stats.cached_tokens
    played = {m: _play(tokenizer, setup, m, tasks, stage) for m in ("lockstep", "engine")}
    prefilled = engine.stats.prompt_tokens - engine.stats.cached_tokens - before
    lock, eng = played["lockstep"], played["engine"]
    assert sum(e.stats()["retries"] for e in eng.episodes) >= 1  # the fast loop ran
    for a, b in zip(lock.episodes, eng.episodes, strict=True):
        assert a.trace() == b.trace() and a.stats() == b.stats()
        (ta, ma, la), (tb, mb, lb) = (a.conversation.training_arrays(),
                                      b.conversation.training_arrays())
        assert ta.tolist() == tb.tolist() and ma.tolist() == mb.tolist()
        np.testing.assert_allclose(la, lb, atol=1e-5)
        assert (b.conversation.training_versions()[mb > 0] == engine.weight_version).all()
    assert lock.stats()["policy_tokens"] == eng.times.reply_tokens > 0
    # one request per reply; only the new observation tokens prefilled (each episode's
    # conversation is parked in its row), the prompt once per task (and its last token)
    replies = sum(len(t.replies) for e in eng.episodes for t in e.turns)
    assert eng.times.policy_calls == replies
    observations = sum(len(s.ids) for e in eng.episodes for s in e.conversation.segments
                       if s.kind in ("observation", "closing"))
    prompts = sum(len(e.prompt) for e in eng.episodes[::2]) + len(eng.episodes)
    assert prefilled <= observations + prompts
    times = eng.times
    assert times.sampling_s > 0 and times.environment_s > 0
    assert times.row_steps >= times.reply_tokens and 0 <= times.metrics()["idle_share"] < 1


def test_the_learner_scores_engine_played_rows_as_the_engine_sampled_them(tokenizer, setup):
    """T=1 with retries, hints and cut-off replies (as tests/learner/test_sampler_parity.py on
    the lock-step path): the learner's log-probs equal the engine's to 1e-4 in f32."""
    learner, state, _, _ = setup
    result = _play(tokenizer, setup, "engine", list(load_tasks("base")[:2]), default_stages()[0],
                   sampling=T1, seed=3,
                   env=BfclEnvConfig(prompt_style="compact", max_message_chars=24))
    kinds = [[s.kind for s in e.conversation.segments if s.in_training] for e in result.episodes]
    assert sum(k.count("closing") for k in kinds) >= 4
    assert sum(e.stats()["retries"] for e in result.episodes) >= 8
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id, length=2048)
    mask = np.asarray(batch.sequences.loss_mask) > 0
    assert mask.sum() >= 40
    gap = np.abs(np.asarray(learner.logprobs(state, batch.sequences)) - batch.old_logprobs)[mask]
    assert gap.max() <= 1e-4, f"max |engine - learner| = {gap.max():.3g} nats"


def test_a_seeded_episode_samples_the_same_whoever_else_is_in_the_engine(tokenizer, setup):
    tasks = list(load_tasks("base")[:3])
    stage = default_stages()[2]

    def replies(tasks, seed):
        result = _play(tokenizer, setup, "engine", tasks, stage, sampling=T1, seed=seed)
        return [[r.ids for t in e.turns for r in t.replies] for e in result.episodes[:2]]

    alone = replies(tasks[:1], seed=7)
    assert replies(tasks, seed=7) == alone
    assert replies(tasks[:1], seed=8) != alone  # the seed decides the draws


def test_engine_mode_refuses_branching_and_other_policies(tokenizer, setup):
    with pytest.raises(ValueError, match=r"RolloutConfig\.mode='engine'.*branch"):
        RolloutConfig(env=COMPACT, mode="engine", branch=BranchConfig(points="every_call"))
    with pytest.raises(ValueError, match=r"RolloutConfig\.mode='async'"):
        RolloutConfig(env=COMPACT, mode="async")
    rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, mode="engine"))
    lock_step = SamplerPolicy(setup[2], setup[3].params, GREEDY, [0], jax.random.key(0))
    with pytest.raises(ValueError, match=r"RolloutConfig\.mode='engine'.*SamplerPolicy"):
        rollout.play(rollout.episodes(list(load_tasks("base")[:1]), default_stages()[2], 0.0, 0),
                     lock_step)
