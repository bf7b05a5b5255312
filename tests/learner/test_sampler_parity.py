"""The learner scores sampled tokens exactly as the sampler reported them: single replies, and
whole SEET rollouts (cut-off replies, retries, hints) on the rows the learner trains on, through
the packed rows the update runs the model over (`learner.pack_rows`, on by default)."""

import re

import jax
import numpy as np
import pytest
from learner_testlib import make_learner, tiny_model

from seetjax.batch import TokenSequences
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.learner.packing import pack_rows
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rl.config import build_plan, default_config
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.sampling import Sampler, SamplingParams
from seetjax.seet.config import default_stages


def test_learner_logprobs_equal_sampler_logprobs():
    model = tiny_model(num_layers=1)
    temperature = 0.7
    learner, state = make_learner(model, {"algorithm": "grpo",
                                                           "temperature": temperature})
    sampler = Sampler(learner.model(state), pad_id=0, min_steps=8)
    rng = np.random.RandomState(0)
    prompts = [rng.randint(1, 256, n).tolist() for n in (5, 9, 3, 7)]
    seqs = sampler.prefill(learner.sampling_params(state), prompts)
    _, completions = sampler.generate(learner.sampling_params(state), seqs, jax.random.key(1), 12,
                                      stop_ids=[-1], sampling=SamplingParams(temperature, top_k=50))
    rows = [p + c.tokens for p, c in zip(prompts, completions)]
    masks = [[0.0] * len(p) + [1.0] * len(c.tokens) for p, c in zip(prompts, completions)]
    seqs = TokenSequences.from_rows(rows, masks, 32)
    assert learner.config.pack_rows and len(pack_rows(seqs).packing.rows.tokens) < len(rows)
    learner_lp = np.asarray(learner.logprobs(state, seqs))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        np.testing.assert_allclose(learner_lp[i, len(p):len(p) + len(c.tokens)], c.logprobs,
                                   atol=1e-5)


@pytest.fixture(scope="module")
def embedded_learner(embedded_dir, tokenizer):
    """The embedded default (random weights, f32) as learner and sampler, compiled once."""
    model = load_hf_checkpoint(embedded_dir)
    learner, state = make_learner(model, {"algorithm": "grpo", "temperature": 1.0})
    return learner, state, Sampler(learner.model(state), pad_id=tokenizer.pad_id)


def test_rollout_old_logprobs_equal_the_learners_on_the_training_rows(embedded_learner,
                                                                       tokenizer):
    """Short reply caps cut most replies off: each is closed with a stop token in the training
    row, and the sampler must have conditioned the later replies on that token as well."""
    learner, state, sampler = embedded_learner
    stage = default_stages()[0]  # augmented, retries: failed attempts masked, hints appended
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=2, env=BfclEnvConfig(prompt_style="compact"),
        limits=EpisodeLimits(max_reply_tokens=5, max_turn_tokens=16, max_episode_tokens=1536)))
    policy = SamplerPolicy(sampler, learner.sampling_params(state), SamplingParams(1.0),
                           tokenizer.stop_ids, jax.random.key(3))
    result = rollout(list(load_tasks("base")[:2]), policy, stage, progress=0.0, step=0, seed=0)
    # Not vacuous: replies were cut off, and trained replies came after them.
    kinds = [[s.kind for s in e.conversation.segments if s.in_training] for e in result.episodes]
    assert sum(k.count("closing") for k in kinds) >= 8
    assert all("reply" in k[k.index("closing"):] for k in kinds)
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id, length=2048)
    mask = np.asarray(batch.sequences.loss_mask) > 0
    assert mask.sum() >= 40
    # the learner runs the model over fewer, packed rows
    packed = pack_rows(batch.sequences).packing.rows
    assert learner.config.pack_rows and len(packed.tokens) < len(result.episodes)
    learner_lp = np.asarray(learner.logprobs(state, batch.sequences))
    gap = np.abs(learner_lp - batch.old_logprobs)[mask]
    assert gap.max() <= 1e-4, f"max |sampler - learner| = {gap.max():.3g} nats"


@pytest.mark.parametrize("section,key,value,named", [
    ("sampling", "top_p", 0.9, "config.sampling.top_p"),
    ("sampling", "top_k", 20, "config.sampling.top_k"),
    ("seet.stage3", "training_context", "drop", "config.seet.stage3.training_context"),
])
def test_configs_whose_sampler_logprobs_are_not_the_learners_are_refused(section, key, value,
                                                                         named):
    """A policy-gradient loss's importance ratio divides by the sampler's log-probs: sampling
    from a truncated distribution, or in a context the training row leaves out, is refused."""
    config = default_config()
    target = config
    for name in section.split("."):
        target = target[name]
    target[key] = value
    with pytest.raises(ValueError, match=re.escape(named)):
        build_plan(config)
    for algorithm in ("ppo", "reinforce"):
        config.learner.algorithm = algorithm
        with pytest.raises(ValueError, match=re.escape(named)):
            build_plan(config)
    config.learner.algorithm = "dpo"  # no importance ratio: allowed
    config.learner.counterfactual_weight = 0.0
    build_plan(config)
