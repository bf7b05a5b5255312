"""Policy versions on every sampled token: `SamplerPolicy.update_weights` swaps the weights and
bumps the version; the next chunk samples from caches recomputed under the new weights (never a
stale row); a reply spanning an update shows both versions in `TrajectoryBatch.versions`; the
step's version figures."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.rollout.versions import version_stats
from seetjax.sampling import Sampler, SamplingParams
from seetjax.seet.config import PLAIN_STAGE

GREEDY = SamplingParams(temperature=0.0)
NEVER_STOP = [-1]  # fixed-length replies: every chunk has its full budget


@pytest.fixture(scope="module")
def weights(embedded_dir):
    """(sampler, v0 params, v1 params): the embedded model's weights and a perturbed copy."""
    model = load_hf_checkpoint(embedded_dir)
    v0 = nnx.state(model)
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(v0))))
    v1 = jax.tree.map(lambda x: x + 0.5 * jnp.std(x) * jax.random.normal(next(keys), x.shape,
                                                                         x.dtype), v0)
    return Sampler(model, pad_id=0), v0, v1


def _policy(sampler, params, version=0):
    return SamplerPolicy(sampler, params, GREEDY, NEVER_STOP, jax.random.key(0), version)


def _greedy(sampler, params, prompts, n):
    """What a fresh policy samples greedily from `prompts` under `params`."""
    fresh = _policy(sampler, params)
    fresh.start(prompts)
    return fresh.generate(range(len(prompts)), [[]] * len(prompts), [n] * len(prompts))


PROMPTS = [[5, 17, 40, 41, 42, 9], [7, 7, 30, 2]]


def test_an_update_between_chunks_is_seen_by_the_next_chunk(weights):
    sampler, v0, v1 = weights
    policy = _policy(sampler, v0)
    policy.start(PROMPTS)
    first = policy.generate([0, 1], [[], [3]], [4, 4])
    assert [c.versions for c in first] == [[0] * 4] * 2
    policy.update_weights(v1, 1)
    second = policy.generate([0, 1], [[], []], [4, 4])
    assert policy.version == 1 and [c.versions for c in second] == [[1] * 4] * 2
    contexts = [PROMPTS[0] + first[0].tokens, PROMPTS[1] + [3] + first[1].tokens]
    fresh = _greedy(sampler, v1, contexts, 4)
    assert [c.tokens for c in second] == [c.tokens for c in fresh]
    for mine, ref in zip(second, fresh):
        np.testing.assert_allclose(mine.logprobs, ref.logprobs, atol=1e-5)
    # the old weights would have gone on otherwise: the check can tell them apart
    assert [c.tokens for c in _greedy(sampler, v0, contexts, 4)] != [c.tokens for c in fresh]


def test_a_prompt_prefilled_before_an_update_is_recomputed_not_reused(weights):
    sampler, v0, v1 = weights
    policy = _policy(sampler, v0)
    policy.start(PROMPTS)  # the shared prompts' cache, filled at v0
    policy.update_weights(v1, 1)
    out = policy.generate([0, 1], [[], []], [5, 5])
    fresh = _greedy(sampler, v1, PROMPTS, 5)
    assert [c.tokens for c in out] == [c.tokens for c in fresh]
    assert [c.versions for c in out] == [[1] * 5] * 2
    for mine, ref in zip(out, fresh):
        np.testing.assert_allclose(mine.logprobs, ref.logprobs, atol=1e-5)


def test_versions_only_move_forward_through_update_weights(weights):
    sampler, v0, v1 = weights
    policy = _policy(sampler, v0, version=3)
    for stale in (3, 2):
        with pytest.raises(ValueError, match=f"SamplerPolicy.version={stale}: must be above"):
            policy.update_weights(v1, stale)
    assert policy.version == 3 and policy.params is v0
    with pytest.raises(AttributeError):
        policy.version = 4  # no writes from outside: the update is the one way


class _UpdatesAfterFirstCall(SamplerPolicy):
    """A learner's update landing after the rollout's first policy call."""

    def __init__(self, *args, new_params, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_params = new_params

    def generate(self, rows, chunks, max_new_tokens):
        out = super().generate(rows, chunks, max_new_tokens)
        if self.version == 0:
            self.update_weights(self.new_params, 1)
        return out


def _rollout(tokenizer, task, policy, decode_chunk):
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=2, env=BfclEnvConfig(prompt_style="compact"), decode_chunk=decode_chunk,
        limits=EpisodeLimits(max_reply_tokens=8, max_turn_tokens=16, max_episode_tokens=4096)))
    return rollout([task], policy, PLAIN_STAGE, progress=0.0, step=0, seed=0)


def test_a_reply_spanning_an_update_shows_both_versions_in_the_batch(weights, tokenizer, task):
    sampler, v0, v1 = weights
    policy = _UpdatesAfterFirstCall(sampler, v0, GREEDY, tokenizer.stop_ids, jax.random.key(0),
                                    new_params=v1)
    result = _rollout(tokenizer, task, policy, decode_chunk=3)
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    versions, mask = np.asarray(batch.versions), np.asarray(batch.sequences.loss_mask)
    assert versions.shape == mask.shape and versions.dtype == np.int32
    np.testing.assert_array_equal(versions >= 0, mask > 0)  # -1 exactly where not sampled
    for row in range(len(result.episodes)):
        sampled = versions[row][mask[row] > 0]
        # the first reply's first 3 tokens came before the update, everything after it
        assert sampled[:3].tolist() == [0, 0, 0] and set(sampled[3:].tolist()) == {1}
    stats = version_stats(result.episodes, learner_step=1)
    zeros, total = int(((versions == 0) & (mask > 0)).sum()), int((mask > 0).sum())
    assert stats == {"versions": 2.0, "newest_version_share": pytest.approx(1 - zeros / total),
                     "oldest_version": 0.0, "staleness": 1.0}


def test_a_sync_step_trains_on_the_newest_version_only(weights, tokenizer, task):
    sampler, v0, _ = weights
    policy = SamplerPolicy(sampler, v0, GREEDY, tokenizer.stop_ids, jax.random.key(0), version=5)
    result = _rollout(tokenizer, task, policy, decode_chunk=0)
    assert version_stats(result.episodes, learner_step=5) == {
        "versions": 1.0, "newest_version_share": 1.0, "oldest_version": 5.0, "staleness": 0.0}
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    assert set(np.unique(np.asarray(batch.versions)).tolist()) == {-1, 5}
