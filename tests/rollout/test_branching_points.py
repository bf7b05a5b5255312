"""Where branches fork ("divergence", "entropy"), how far they play (until="turn"), and SEET's
records taking a verified branch's reply as their target (issue 44 items 1-3). Scripted: no model.
multi_turn_base_0's turn 0 expects cd(document), mkdir(temp), mv(final_report.pdf, temp)."""

import dataclasses

import numpy as np
import pytest

from seetjax.batch import row_mask
from seetjax.losses.gigpo import GiGPOAdvantageConfig, gigpo_advantages
from seetjax.rewards import RewardConfig
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.branching import BranchConfig, TurnBranch, fork_segment
from seetjax.rollout.episode import Episode, EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.sampling import Completion
from seetjax.seet.anchors import AnchorPool
from tests.rollout.scripted import ScriptedPolicy
from tests.rollout.test_branching import CD, MKDIR, MV
from tests.rollout.test_loop import COMPACT, STAGE3, replay

WRONG_MKDIR = "[mkdir(dir_name='tmp')]"  # runs cleanly; turn 0 then fails its state check


class Passes(ScriptedPolicy):
    """Scripted replies per play: the p-th `start` plays `passes[p]` (row -> replies, "Done."
    once they run out); a reply's first token gets logprob `first[text]` (0 by default). Keeps
    the contexts each play started from."""

    def __init__(self, tokenizer, passes, first=None):
        self.passes, self.first, self.started = iter(passes), first or {}, []
        self.queues, self.said = [], {}
        super().__init__(tokenizer, self._next)

    def _next(self, row):
        self.said[row] = self.queues[row].pop(0) if self.queues[row] else "Done."
        return self.said[row]

    def start(self, prompts):
        self.started.append([list(p) for p in prompts])
        self.queues = [list(s) for s in next(self.passes)]

    def generate(self, rows, chunks, max_new_tokens):
        out = super().generate(rows, chunks, max_new_tokens)
        return [Completion(c.tokens, [self.first.get(self.said[r], 0.0)] + c.logprobs[1:],
                           c.finish_reason) for r, c in zip(rows, out)]


def rollout_with(tokenizer, pool=None, **branch):
    return Rollout(tokenizer, RolloutConfig(group_size=1, env=COMPACT,
                                            branch=BranchConfig(**branch)), pool=pool)


def before(episode, segment):
    """The tokens of `episode`'s conversation before `segment`."""
    return [t for s in episode.conversation.segments[:segment] for t in s.ids]


def reply_segments(episode):
    return [r.segment for t in episode.turns for r in t.replies]


def test_divergence_forks_resample_the_divergent_call_from_its_state(task, tokenizer):
    """Row 0 runs cd, then mkdir(tmp), and turn 0 fails: its first divergence from the ground
    truth is the mkdir reply (segment 3). Two branches start from the context and the state that
    reply was sampled in (after cd) and sample their own: one finishes the turn, one gives up."""
    rollout = rollout_with(tokenizer, points="divergence", k=2)
    policy = Passes(tokenizer, [[[CD, WRONG_MKDIR]], [[MKDIR, MV], []]])
    result = rollout([task], policy, STAGE3, 0.0, step=0, seed=0)
    original, *branches = result.episodes
    assert [e.branch for e in result.episodes] == [False, True, True]
    divergent = reply_segments(original)[1]
    assert divergent == 3 and original.conversation.segments[divergent].kind == "reply"
    assert [fork_segment(b) for b in branches] == [divergent, divergent]
    prefix = before(original, divergent)
    assert policy.started[1] == [prefix, prefix]  # the branches' rows: the parent's context
    # the same state as the divergent reply's (its GiGPO step group), the parent's cd in it
    assert {b.reply_states[divergent] for b in branches} == {original.reply_states[divergent]}
    assert [b.executed[0].name for b in branches] == ["cd", "cd"]
    assert [b.turns[b.inherited_turns].passed for b in branches] == [True, False]
    assert original.turns[0].passed is False and original.forks == 1
    # max_forks=1: turns 1-3, failed too, fork nothing
    assert result.stats()["branch_rows"] == 2.0


def test_entropy_forks_at_the_least_likely_call_openings(task, tokenizer):
    """Three call openings with first-token logprobs -0.1 (cd), -3 (mkdir), -1 (mv); "Done."
    replies, less likely still, open no call. max_forks=2 forks before mkdir, then before mv;
    a budget of one token stops after the first round. Forking before the first reply starts
    the branch afresh."""
    script = [[[CD, MKDIR, MV]]]
    first = {CD: -0.1, MKDIR: -3.0, MV: -1.0, "Done.": -9.0}
    rollout = rollout_with(tokenizer, points="entropy", k=1, max_forks=2)
    policy = Passes(tokenizer, script + [[[]], [[]]], first)
    episodes = rollout([task], policy, STAGE3, 0.0, step=0, seed=0).episodes
    cd, mkdir, mv = reply_segments(episodes[0])[:3]
    assert [fork_segment(b) for b in episodes[1:]] == [mkdir, mv]
    assert policy.started[1:] == [[before(episodes[0], s)] for s in (mkdir, mv)]
    budgeted = rollout_with(tokenizer, points="entropy", k=1, max_forks=2, budget=1)
    policy = Passes(tokenizer, script + [[[]], [[]]], first)
    episodes = budgeted([task], policy, STAGE3, 0.0, step=0, seed=0).episodes
    assert [fork_segment(b) for b in episodes[1:]] == [mkdir]
    # the least likely opening is the first reply: its branch is the episode as it started
    policy = Passes(tokenizer, script + [[[MKDIR]]], {**first, CD: -5.0})
    rollout = rollout_with(tokenizer, points="entropy", k=1)
    original, branch = rollout([task], policy, STAGE3, 0.0, step=0, seed=0).episodes
    assert fork_segment(branch) == cd == 1 and policy.started[1] == [original.prompt]
    assert branch.branch and branch.inherited_turns == 0 and branch.executed[0].name == "mkdir"


def test_a_turn_horizon_branch_stops_at_its_turn_and_is_scored_on_it(play, task, tokenizer):
    """Row 0 calls cd and gives up (progress 0 of 4 turns); its branch from after cd finishes
    turn 0 (mkdir, mv, "Done.") and stops there: three replies of its own, one turn, progress
    1 (the turn alone), rewarded on its last reply. Played to the episode's end it would score
    1/4."""
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1, env=COMPACT, branch=BranchConfig(
        points="every_call", k=1, until="turn")))
    asked = []
    queues = [[CD], [MKDIR, MV]]

    def respond(row):
        asked.append(row)
        return queues[row].pop(0) if queues[row] else "Done."

    episodes = rollout.episodes([task], STAGE3, progress=0.0, seed=0)
    rollout.play(episodes, ScriptedPolicy(tokenizer, respond))
    original, branch = episodes
    assert isinstance(branch, TurnBranch) and branch.done
    assert asked.count(1) == 3 and len(branch.turns) == 1 and branch.turns[0].passed
    result = rollout.slow_loop(episodes, STAGE3, step=0)
    assert result.rewards().tolist() == [0.0, 1.0]
    last = max(i for i, s in enumerate(branch.conversation.segments) if s.kind == "reply")
    assert [p for p, _ in result.scored[1]] == [len(branch.conversation.training_ids(last + 1)) - 1]
    assert len(branch.rewards(RewardConfig(kind="shaped"))) == 1  # one turn scored
    with pytest.raises(ValueError, match=r"BranchConfig.until='turn': needs a reward"):
        branch.rewards(RewardConfig(kind="env"))
    with pytest.raises(ValueError, match=r"BranchConfig.until='step': must be one of"):
        BranchConfig(until="step")


def played_as(kind, tokenizer, task, stage, replies, limits):
    """An episode of `task` played as `kind` (Episode, or a TurnBranch of its first turn) on
    scripted replies."""
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1, env=COMPACT, limits=limits))
    (episode,) = rollout.episodes([task], stage, progress=0.0, seed=0)
    episode.__class__ = kind  # a fresh episode, a branch of nothing: inherited_turns 0
    for text in replies:
        ids = tokenizer.encode(text) + [tokenizer.stop_ids[0]]
        episode.reply(Completion(ids, [0.0] * len(ids), "stop"))
    return episode


def training_view(episode):
    return [(s.kind, s.in_training, s.masked) for s in episode.conversation.segments]


@pytest.mark.parametrize("context", ["mask", "drop"])
def test_a_turn_branch_treats_a_last_failed_attempt_as_the_episode_does(tokenizer, task,
                                                                      context):
    """A retry granted to the reply that spends the turn's token budget: the turn ends there,
    and the attempt is masked or dropped (`training_context`) in a turn branch as in the
    episode; the branch's row then ends (no next request)."""
    stage = dataclasses.replace(STAGE3, retry_budget=1, training_context=context)
    replies = [CD, "[cd(folder='nope')]"]
    limits = EpisodeLimits(max_turn_tokens=sum(len(tokenizer.encode(t)) + 1 for t in replies))
    episode = training_view(played_as(Episode, tokenizer, task, stage, replies, limits))
    branch = played_as(TurnBranch, tokenizer, task, stage, replies, limits)
    attempt = [i for i, (kind, _, _) in enumerate(episode) if kind == "reply"][1]
    assert episode[attempt] == (("reply", True, True) if context == "mask"
                                else ("reply", False, False))
    assert training_view(branch) == episode[:attempt + 1] and len(episode) > attempt + 1
    assert branch.done and not branch.truncated and branch.turns[0].retries == 1


def test_a_turn_branch_is_truncated_where_its_next_request_would_not_fit(tokenizer, task):
    """Turn 0 ends with the context nearly full: the episode, unable to add turn 1's request,
    is truncated (the shaped reward's timeout); its turn branch, which would not add it anyway,
    is truncated the same, so a parent and its branches are judged alike."""
    replies = [CD, MKDIR, MV, "Done."]
    played = played_as(Episode, tokenizer, task, STAGE3, replies, EpisodeLimits())
    request = len(played.conversation.segments[-1].ids)
    room = played.conversation.num_tokens - request + 2  # as Episode._next leaves room
    for fits in (True, False):
        limits = EpisodeLimits(max_reply_tokens=2, max_episode_tokens=room + request - (not fits))
        episode, branch = (played_as(kind, tokenizer, task, STAGE3, replies, limits)
                           for kind in (Episode, TurnBranch))
        assert episode.truncated == branch.truncated == (not fits) and branch.done
        shaped = RewardConfig(kind="shaped")
        assert branch.rewards(shaped) == episode.rewards(shaped)[:len(branch.rewards(shaped))]
        assert len(branch.rewards(shaped)) == 1 + (not fits)  # turn 0, then the timeout


def test_turn_returns_compare_a_turn_branch_with_its_parents_fork_turn(task, tokenizer):
    """The same episodes on the shaped reward (a reward per turn), through the batch: row 0's
    turns 1-3 begin where `turn_starts` marks them, and with horizon 'turn' the step group at the
    fork state (row 0's "Done." after cd, the branch's mkdir) compares turn 0's rewards, r0 and
    the branch's r_b: A^S = -+(r_b - r0) / 2 (gamma 1, no std). To the episode's end, row 0's
    value there would also hold turns 1-3's rewards, which the branch never played."""
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=1, env=COMPACT, reward=RewardConfig(kind="shaped"),
        branch=BranchConfig(points="every_call", k=1, until="turn")))
    queues = [[CD], [MKDIR, MV]]
    episodes = rollout.episodes([task], STAGE3, progress=0.0, seed=0)
    rollout.play(episodes, ScriptedPolicy(tokenizer, lambda row: queues[row].pop(0)
                                          if queues[row] else "Done."))
    result = rollout.slow_loop(episodes, STAGE3, step=0)
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id)
    turns = np.asarray(batch.turn_starts)
    # each later turn begins right after the reply that ended the turn before; the branch's
    # row ends with its turn's last reply (the next request, never answered, is not in it)
    ends = [p for p, _ in result.scored[0]]
    assert np.flatnonzero(turns[0]).tolist() == [p + 1 for p in ends[:3]]
    branch_length = int((np.asarray(batch.sequences.segment_ids)[1] > 0).sum())
    assert result.scored[1][-1][0] == branch_length - 1 and not turns[1].any()
    r0, rest = result.scored[0][0][1], sum(r for _, r in result.scored[0][1:])
    r_b = sum(r for _, r in result.scored[1])
    assert r_b > r0 and rest != 0  # the branch passed turn 0; the parent's later turns count

    def step_level(horizon):
        def advantages(omega):
            return np.asarray(gigpo_advantages(
                batch.token_rewards, batch.reward_mask, batch.group_ids,
                row_mask(batch.sequences), GiGPOAdvantageConfig(
                    omega=omega, gamma=1.0, std="none", horizon=horizon),
                batch.step_keys, batch.turn_starts)[0])
        return advantages(1.0) - advantages(0.0)

    mask = np.asarray(batch.sequences.loss_mask)
    fork = [np.flatnonzero(np.diff(mask[row], prepend=0) > 0)[1 - row] for row in (0, 1)]
    turn, episode = step_level("turn"), step_level("episode")
    np.testing.assert_allclose([turn[0, fork[0]], turn[1, fork[1]]],
                               [-(r_b - r0) / 2, (r_b - r0) / 2], atol=1e-6)
    np.testing.assert_allclose(episode[0, fork[0]], (r0 + rest - r_b) / 2, atol=1e-6)


@pytest.fixture
def anchored(task, tokenizer):
    """A pool with historical anchors for every turn (a ground-truth replay); turn 0's anchor is
    one reply making all three calls, so a record's target after cd is those calls rendered."""
    pool = AnchorPool()
    plain = Rollout(tokenizer, RolloutConfig(group_size=1, env=COMPACT), pool=pool)
    plain([task], Passes(tokenizer, [[replay(task)]]), STAGE3, 0.0, step=0, seed=0)
    return pool


@pytest.mark.parametrize("branch_script, source", [([MKDIR, MV], "branch"),
                                                   ([WRONG_MKDIR], "historical")])
def test_a_verified_branch_is_the_record_target(task, tokenizer, anchored, branch_script,
                                                source):
    """Row 0 fails turn 0 at its mkdir(tmp) reply; its branch from that reply's state either
    passes the turn (its mkdir reply is then the record's target, as sampled, source "branch")
    or fails it too (the historical anchor's calls are the target, as without branches)."""
    stage = dataclasses.replace(STAGE3, peer_anchors=False)
    rollout = rollout_with(tokenizer, pool=anchored, points="divergence", k=1)
    policy = Passes(tokenizer, [[[CD, WRONG_MKDIR]], [branch_script]])
    result = rollout([task], policy, stage, 0.0, step=1, seed=0)
    original, branch = result.episodes
    divergent = fork_segment(branch)
    prefix = tuple(original.conversation.training_ids(divergent))
    record = next(r for r in result.records if r.prefix_ids == prefix)  # the original's first
    assert record.turn == 0 and record.failed_ids == tuple(
        original.conversation.segments[divergent].ids)
    branch_reply = tuple(branch.conversation.segments[divergent].ids)
    assert record.anchor_source == source
    assert result.anchors_used[source] >= 1
    if source == "branch":
        assert record.anchor_ids == branch_reply == tuple(
            tokenizer.encode(MKDIR) + [tokenizer.reply_end_id])
    else:
        text = tokenizer.decode(list(record.anchor_ids))
        assert "mkdir(dir_name='temp')" in text and "mv(" in text and "cd(" not in text
        assert result.anchors_used["branch"] == 0


@pytest.mark.parametrize("branch_script, records", [([MKDIR, MV], 1), ([WRONG_MKDIR], 0)])
def test_a_verified_branch_is_the_anchor_where_there_is_none(task, tokenizer, branch_script,
                                                             records):
    """No anchor anywhere (an empty pool, peer anchors off as in SEET's stages 1-2): a branch of
    the episode that passed the failed turn from its divergent state is the anchor of last
    resort, and its reply there the record's target (source "branch"); a branch that failed
    too makes no record."""
    stage = dataclasses.replace(STAGE3, peer_anchors=False)
    rollout = rollout_with(tokenizer, points="divergence", k=1)
    policy = Passes(tokenizer, [[[CD, WRONG_MKDIR]], [branch_script]])
    result = rollout([task], policy, stage, 0.0, step=1, seed=0)
    original, branch = result.episodes
    assert len(result.records) == records and result.anchors_used["branch"] == records
    if records:
        (record,) = result.records
        divergent = fork_segment(branch)
        assert record.anchor_source == "branch" and record.turn == 0
        assert record.prefix_ids == tuple(original.conversation.training_ids(divergent))
        assert record.failed_ids == tuple(original.conversation.segments[divergent].ids)
        assert record.anchor_ids == tuple(branch.conversation.segments[divergent].ids)
