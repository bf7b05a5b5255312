"""An episode whose prompt leaves no room for a reply under the episode's token cap is never
played and is left out of the training batch's rows and group statistics, counted."""

import jax.numpy as jnp
import numpy as np

from seetjax.batch import row_mask, target_mask
from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.losses.advantages import ReinforceAdvantageConfig, reinforce_advantages
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.result import RolloutResult
from seetjax.seet.config import PLAIN_STAGE
from tests.rollout.scripted import ScriptedPolicy
from tests.rollout.test_loop import replay

TASKS = load_tasks("base")[:2]  # prompts of 946 and 543 tokens
LIMITS = EpisodeLimits(max_reply_tokens=64, max_turn_tokens=256, max_episode_tokens=900)


class Recording(ScriptedPolicy):
    """A scripted policy that keeps every (row, max_new_tokens) it was asked for."""

    asked: list[tuple[int, int]]

    def generate(self, rows, chunks, max_new_tokens):
        self.asked += list(zip(rows, max_new_tokens))
        return super().generate(rows, chunks, max_new_tokens)


def test_a_prompt_over_the_episode_cap_is_never_played_and_left_out_of_the_batch(tokenizer):
    rollout = Rollout(tokenizer, RolloutConfig(env=BfclEnvConfig(prompt_style="compact"),
                                               group_size=2, limits=LIMITS))
    episodes = rollout.episodes(TASKS, PLAIN_STAGE, progress=0.0, seed=0)
    assert [len(e.prompt) >= LIMITS.max_episode_tokens for e in episodes] == [1, 1, 0, 0]
    scripts = [[], [], replay(TASKS[1]), []]  # task B: one sample calls, one is silent
    policy = Recording(tokenizer, lambda row: scripts[row].pop(0) if scripts[row] else "Done.")
    policy.asked = []
    rollout.play(episodes, policy)
    # no 0-token reply with a closing token for the long prompt: it is never asked for one
    assert {row for row, _ in policy.asked} == {2, 3}
    assert min(limit for _, limit in policy.asked) > 0
    for e in episodes[:2]:
        assert e.truncated and len(e.conversation.segments) == 1
        assert all(t.failed for t in e.turns)  # an evaluation counts the task as failed
    assert RolloutResult(episodes, [], {}).stats()["checked_turn_accuracy"] < 0.5

    result = rollout.slow_loop(episodes, PLAIN_STAGE, step=0)
    assert result.episodes == episodes[2:]
    assert result.stats()["episodes_over_token_cap"] == 2.0
    rewards = result.rewards()
    assert rewards[0] > rewards[1] == 0.0
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    seqs = batch.sequences
    # as many rows as episodes were started (the learner's shapes do not change), the left-out
    # ones padding: no token, no reward, in no group
    assert seqs.tokens.shape[0] == 4
    assert np.asarray(row_mask(seqs)).tolist() == [1, 1, 0, 0]
    assert not np.asarray(batch.reward_mask)[2:].any() and batch.group_ids.tolist()[2:] == [-1, -1]
    # every reward sits on a row that trains tokens, and the batch statistics see only those
    trained = np.asarray(target_mask(seqs)).sum(1)
    assert all(trained[np.asarray(batch.reward_mask).any(1)] > 0)
    advantages, _ = reinforce_advantages(*map(jnp.asarray, (
        batch.token_rewards, batch.reward_mask, batch.group_ids, row_mask(seqs))),
        ReinforceAdvantageConfig())
    on = np.asarray(target_mask(seqs)) > 0
    for row in (0, 1):
        np.testing.assert_allclose(np.asarray(advantages)[row][on[row]],
                                   rewards[row] - rewards.mean(), rtol=1e-6)
