"""Forking an episode at a tool-call boundary: environment, logs and KV-cache row (issue 44)."""

import jax
import numpy as np
import pytest
from flax import nnx

from seetjax.batch import row_mask
from seetjax.envs.registry import make_env
from seetjax.envs.state_keys import canonical_tokens, state_key
from seetjax.losses.gigpo import GiGPOAdvantageConfig, gigpo_advantages
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.branching import BranchConfig, at_boundary, fork_episode, fork_episodes
from seetjax.rollout.episode import Episode, EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.sampling import Completion, Sampler, SamplingParams
from seetjax.seet.config import StageConfig
from tests.rollout.conftest import calls_text
from tests.rollout.test_loop import COMPACT, STAGE3, replay

CD = "[cd(folder='document')]"
MKDIR = "[mkdir(dir_name='temp')]"
MV = "[mv(source='final_report.pdf', destination='temp')]"


def new_episode(task, tokenizer, seed=0):
    return Episode(task, 0, tokenizer, make_env(COMPACT), STAGE3, 0.0, EpisodeLimits(), seed=seed)


def say(episode, tokenizer, text):
    ids = tokenizer.encode(text) + [tokenizer.reply_end_id]
    return episode.reply(Completion(ids, [-0.5] * len(ids), "stop"))


def state(episode):
    """(state key, the state view's full canonical serialisation): equal iff equal states."""
    return state_key(episode.env), canonical_tokens(episode.env.state_view())


def test_a_fork_is_a_replay_from_scratch_of_the_same_calls(task, tokenizer):
    parent = new_episode(task, tokenizer)
    say(parent, tokenizer, CD)
    assert at_boundary(parent)
    (child,) = fork_episodes(parent, 1, lambda: make_env(COMPACT), seed=5)
    assert child.env is not parent.env
    say(child, tokenizer, MKDIR)
    replay = new_episode(task, tokenizer, seed=9)
    for text in (CD, MKDIR):
        say(replay, tokenizer, text)
    assert state(child) == state(replay)
    assert child.conversation.training_ids() == replay.conversation.training_ids()
    assert child.trace() == replay.trace() and child.executed == replay.executed
    assert child.step_keys() == replay.step_keys()  # the keys GiGPO groups by, fork step too
    # the parent never saw the child's call
    assert state(parent) != state(child) and len(parent.conversation.segments) == 3


def test_siblings_are_independent(task, tokenizer):
    parent = new_episode(task, tokenizer)
    say(parent, tokenizer, CD)
    before = state(parent)
    a, b = fork_episodes(parent, 2, lambda: make_env(COMPACT), seed=0)
    assert state(a) == state(b) == before
    say(a, tokenizer, MKDIR)
    assert state(b) == before and state(parent) == before
    assert len(b.conversation.segments) == len(parent.conversation.segments) == 3
    assert [r.calls for t in b.turns for r in t.replies] == [
        r.calls for t in parent.turns for r in t.replies]
    # the copies share only what never changes
    assert a.tokenizer is parent.tokenizer and a.task is parent.task
    assert a.turns is not b.turns and a.conversation.segments[0] is not b.conversation.segments[0]


def test_forks_only_at_a_boundary_of_a_live_episode(task, tokenizer):
    parent = new_episode(task, tokenizer)
    say(parent, tokenizer, CD)
    with pytest.raises(ValueError, match="fork_episodes.copies=0: must be >= 1"):
        fork_episodes(parent, 0, lambda: make_env(COMPACT), seed=0)
    parent.conversation.add_reply([tokenizer.reply_end_id], [0.0], True)  # sampled, not answered
    assert not at_boundary(parent)
    with pytest.raises(ValueError, match=r"Episode\.done/last segment=\(False, 'reply'\)"):
        fork_episode(parent, make_env(COMPACT), seed=0)


def test_a_forked_kv_row_continues_as_a_re_prefill_of_its_tokens(embedded_dir, tokenizer, task):
    """Rows 0 and 1 (two prompts) sample a reply; row 1 forks into rows 2 and 3, all four get
    the same observation and continue greedily: rows 1-3 are token-identical, logprobs within
    1e-5, to a fresh prefill of row 1's tokens (row 0, another context, is not)."""
    model = load_hf_checkpoint(embedded_dir)
    sampler = Sampler(model, pad_id=tokenizer.pad_id)

    def policy():
        return SamplerPolicy(sampler, nnx.state(model), SamplingParams(temperature=0.0),
                             tokenizer.stop_ids, jax.random.key(0))

    prompt = new_episode(task, tokenizer).prompt
    prompts = [prompt, prompt[:-40] + prompt[-20:]]
    observation = tokenizer.encode("<|im_start|>user\nList the files.<|im_end|>\n"
                                   "<|im_start|>assistant\n")
    forked = policy()
    forked.start(prompts)
    first = forked.generate([0, 1], [[], []], [6, 6])
    forked.fork(1, [2, 3])
    continued = forked.generate([0, 1, 2, 3], [observation] * 4, [8] * 4)
    fresh = policy()
    fresh.start([prompts[1] + first[1].tokens + observation])
    (reference,) = fresh.generate([0], [[]], [8])
    for c in continued[1:]:
        assert c.tokens == reference.tokens
        np.testing.assert_allclose(c.logprobs, reference.logprobs, atol=1e-5)
    assert np.abs(np.subtract(continued[0].logprobs, reference.logprobs)).max() > 1e-3
    assert forked.cached[1] == forked.cached[2] == forked.cached[3] != forked.cached[0]
    with pytest.raises(ValueError, match=r"SamplerPolicy.fork=\(0, \[1\]\)"):
        forked.fork(0, [1])  # row 1 is live already

def test_branches_give_the_exact_state_conditioned_advantage(play, task, tokenizer):
    """Row 0 calls cd (turn 0 of 4 expects cd, mkdir, mv) then gives up: its one call forks two
    branch rows from the state after cd. Branch 1 finishes turn 0, branch 2 gives up too.
    Progress returns 0, 1/4, 0 (mean 1/12). GiGPO (gamma 1, no std): A = A^E + A^S; at the fork
    state the three next replies form one step group, so the branch action's A^S is its return
    minus the siblings' mean; the branches' prefix (row 0's cd) is context only."""
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=1, env=COMPACT, branch=BranchConfig(points="every_call", k=2)))
    _, episodes = play([task], STAGE3, [[CD], [MKDIR, MV], []], rollout=rollout)
    assert len(episodes) == 3 and [e.branch for e in episodes] == [False, True, True]
    result = rollout.slow_loop(episodes, STAGE3, step=0)
    assert result.rewards().tolist() == [0.0, 0.25, 0.0]
    assert result.group_ids().tolist() == [0, 0, 0]
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    advantages, _ = gigpo_advantages(
        batch.token_rewards, batch.reward_mask, batch.group_ids, row_mask(batch.sequences),
        GiGPOAdvantageConfig(omega=1.0, gamma=1.0, std="none"), batch.step_keys)
    advantages, mask = np.asarray(advantages), np.asarray(batch.sequences.loss_mask)

    def reply(row, n):  # (first position, last position + 1) of row's n-th reply in training
        ends = [p for p in range(1, mask.shape[1]) if mask[row, p - 1] and not mask[row, p]]
        starts = [p for p in range(1, mask.shape[1]) if mask[row, p] and not mask[row, p - 1]]
        return starts[n], ends[n]

    episode_adv = np.array([0.0, 0.25, 0.0]) - 1 / 12
    cd = reply(0, 0)
    np.testing.assert_allclose(advantages[0, cd[0]:cd[1]], episode_adv[0], atol=1e-6)  # alone
    for row in range(3):  # the replies from the fork state: A^E + (R - mean over siblings)
        start, end = reply(row, 1 if row == 0 else 0)
        np.testing.assert_allclose(advantages[row, start:end], 2 * episode_adv[row], atol=1e-6)
    for row in (1, 2):  # the prefix: in the sequence, not trained, in no step group
        tokens = episodes[row].conversation.training_ids()
        assert tokens[:cd[1]] == episodes[0].conversation.training_ids()[:cd[1]]
        assert not mask[row, :cd[1]].any() and (batch.step_keys[row, :cd[1]] < 0).all()
    # compute matching: a branch counts only the tokens it sampled
    sampled = [len(tokenizer.encode(t)) + 1 for t in (MKDIR, MV)]
    assert episodes[1].stats()["policy_tokens"] == sum(sampled) + 4 * (
        len(tokenizer.encode("Done.")) + 1)  # its replies after the fork, 4 turns' "Done."


def test_a_branch_counts_its_own_retries_and_hints_not_its_originals(play, task, tokenizer):
    """Row 0's first call, cd into a folder that is not there, runs and fails: the fast loop
    retries it with a hint (the budget of one spent) and, its call having run, the episode forks
    one branch there. The branch goes on with mkdir (runs), then mv, which fails (no retry left;
    augmented mode still hints), then "Done." to every turn. The retry and the first hint came
    before the fork: the original's, counted once in the step's metrics (a branch that inherited
    them doubled them)."""
    stage = StageConfig(stage=1, env_mode="augmented", retry_budget=1)
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=1, env=COMPACT, branch=BranchConfig(points="every_call", k=1)))
    _, episodes = play([task], stage, [["[cd(folder='nope')]", CD], [MKDIR, MV]],
                       rollout=rollout)
    original, branch = episodes
    assert branch.branch and original.stats()["retries"] == original.stats()["hints"] == 1
    assert branch.counters()["retries"] == 1  # the fork turn's log: the original's so far
    own = branch.stats()
    assert (own["retries"], own["hints"], own["interceptions"]) == (0, 1, 0)  # mv's hint
    sampled = [len(tokenizer.encode(t)) + 1 for t in (MKDIR, MV)]
    assert own["policy_tokens"] == sum(sampled) + 4 * (len(tokenizer.encode("Done.")) + 1)
    stats = rollout.slow_loop(episodes, stage, step=0).stats()
    assert (stats["retries"], stats["hints"]) == (0.5, 1.0)  # means over the two rows


def test_branch_config_is_validated_and_a_budget_stops_forks(play, task, tokenizer):
    for field, value, message in (("points", "some", "must be one of"), ("k", 0, "must be an integer >= 1"),
                                  ("budget", -1, "must be an integer >= 0")):
        with pytest.raises(ValueError, match=f"BranchConfig.{field}={value!r}: {message}"):
            BranchConfig(**{field: value})
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=1, env=COMPACT, branch=BranchConfig(points="every_call", k=1, budget=1)))
    _, episodes = play([task], STAGE3, [[CD, MKDIR], [MV]], rollout=rollout)
    # the first fork spends the budget: row 0's second call forks nothing
    assert [e.branch for e in episodes] == [False, True]


def test_the_slow_loop_skips_the_turns_a_branch_inherited(play, task, tokenizer):
    """A historical anchor for every turn; row 0 gives up turn 0, then forks at turn 1's first
    call: turn 0 failed in both rows, but only the original's failure becomes a record."""
    plain, full = play([task], STAGE3, [replay(task)])
    plain.slow_loop(full, STAGE3, step=1)
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=1, env=COMPACT, branch=BranchConfig(points="every_call", k=1)),
        pool=plain.pool)
    first_call = calls_text(task.ground_truth[1][:1])
    _, episodes = play([task], STAGE3, [["Done.", first_call], []], rollout=rollout)
    assert [e.inherited_turns for e in episodes] == [0, 1]
    result = rollout.slow_loop(episodes, STAGE3, step=2)
    records = result.records
    # turns 0, 2, 3 of row 0 and 2, 3 of the branch failed without a call; turn 1 called
    assert result.stats()["silent_turns"] == pytest.approx(5 / 7)
    # later turns start from other states than the anchors' (turn 0's calls never ran)
    assert [r.turn for r in records] == [0]
