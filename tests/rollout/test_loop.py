"""Batched rollouts: peers and historical anchors, counterfactual records, the sampler policy."""

import jax
import numpy as np
import pytest
from flax import nnx

from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rollout.episode import EpisodeLimits
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.rollout.result import PlayTimes
from seetjax.sampling import Completion, Sampler, SamplingParams
from seetjax.seet.config import StageConfig, default_stages
from tests.rollout.conftest import calls_text
from tests.rollout.scripted import ScriptedPolicy

COMPACT = BfclEnvConfig(prompt_style="compact")  # the environment section of these rollouts

STAGE3 = default_stages()[2]


def replay(task, skip_turn=None):
    """Ground-truth replies turn by turn; `skip_turn` ends that turn without calling."""
    script = []
    for t, calls in enumerate(task.ground_truth):
        if calls and t != skip_turn:
            script.append(calls_text(calls))
        script.append("Done.")
    return script


def test_a_group_with_one_success_yields_peer_records(play, task, tokenizer):
    rollout, episodes = play([task], STAGE3, [replay(task), replay(task, skip_turn=1)],
                             group_size=2)
    good, bad = episodes
    assert all(t.passed for t in good.turns)
    assert bad.turns[1].passed is False and bad.turns[0].passed
    result = rollout.slow_loop(episodes, STAGE3, step=7)
    records = [r for r in result.records if r.turn == 1]
    assert len(records) == 1 and result.anchors_used["peer"] >= 1
    r = records[0]
    assert (r.sample, r.anchor_source, r.divergence.kind, r.divergence.index) == (
        1, "peer", "missing_call", 0)
    assert r.divergence.anchor == task.ground_truth[1][0]
    # the failed step is the reply that ended turn 1; the anchor step is the peer's own reply
    assert tokenizer.decode(r.failed_ids) == "Done.<|im_end|>"
    peer_reply = next(s for s in good.turns[1].replies)
    assert r.anchor_ids == peer_reply.ids
    # the shared prefix is the failed episode's training sequence up to that reply
    assert tokenizer.decode(r.prefix_ids).endswith(
        task.turns[1][0]["content"] + "<|im_end|>\n<|im_start|>assistant\n")
    assert r.to_json()["divergence"]["kind"] == "missing_call"
    assert result.rewards().tolist() == [1.0, bad.progress_reward()]
    assert result.group_ids().tolist() == [0, 0]
    stats = result.stats()
    assert stats["turn_accuracy"] < 1.0 and stats["format_validity"] == 1.0
    # the skipped turn: one checked turn of the group failed without a call
    assert stats["silent_turns"] == pytest.approx(1 / (2 * sum(map(bool, task.ground_truth))))


def test_historical_anchors_serve_later_steps_and_records_never_touch_rewards(play, task):
    rollout, first = play([task], STAGE3, [replay(task)])
    rollout.slow_loop(first, STAGE3, step=1)
    assert rollout.pool.counts()["historical"] == task.num_turns
    _, later = play([task], STAGE3, [replay(task, skip_turn=1)], rollout=rollout)
    result = rollout.slow_loop(later, STAGE3, step=2)
    assert [r.anchor_source for r in result.records] == ["historical"]
    assert result.rewards().tolist() == [later[0].progress_reward()]
    no_history = StageConfig(stage=3, env_mode="standard", historical_anchors=False)
    _, again = play([task], no_history, [replay(task, skip_turn=1)], rollout=rollout)
    assert rollout.slow_loop(again, no_history, step=3).records == []


def test_induced_anchor_from_interception(play, task):
    stage2 = default_stages()[1]
    rollout, episodes = play([task], stage2, [["[cd(folder='wrong')]"] + replay(task)])
    assert episodes[0].turns[0].interceptions == 1 and episodes[0].turns[0].passed
    rollout.slow_loop(episodes, stage2, step=1)
    assert rollout.pool.counts()["induced"] == 1  # turn 0 needed interception
    anchor = rollout.pool.lookup(task.id, 0, episodes[0].turns[0].state_key, now=1,
                                 sources=["induced"])
    assert [c.name for c in anchor.calls] == ["cd", "mkdir", "mv"]
    # an intercepted call, then prose (intercepted too, as premature, until the budget is spent):
    # the turn fails, silent in the environment's trace (the reward's view) but not to the
    # rollout's metric, since the policy did call
    _, gave_up = play([task], stage2, [["[cd(folder='wrong')]", "Done."]])
    turn = gave_up[0].turns[0]
    assert turn.interceptions == stage2.interception_budget and turn.failed and not turn.silent
    assert 0 in gave_up[0].trace().unattempted_turns()


def test_policy_tokens_count_every_sampled_reply_retries_included(tokenizer, task):
    stage2 = default_stages()[1]
    rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=2))
    episodes = rollout.episodes([task], stage2, progress=0.0, seed=0)
    # row 0's first reply is intercepted, row 1's is a format error that is retried
    queues = [["[cd(folder='wrong')]"] + replay(task), ["[cd(folder="] + replay(task)]
    sent = []

    def respond(row):
        sent.append(queues[row].pop(0) if queues[row] else "Done.")
        return sent[-1]

    times = rollout.play(episodes, ScriptedPolicy(tokenizer, respond))
    assert episodes[0].stats()["interceptions"] == 1 and episodes[1].stats()["retries"] >= 1
    stats = rollout.slow_loop(episodes, stage2, step=1).stats()
    assert stats["policy_tokens"] == sum(len(tokenizer.encode(t)) + 1 for t in sent)
    assert stats["policy_tokens"] == times.reply_tokens == sum(
        e.stats()["policy_tokens"] for e in episodes)  # a total, not a mean over episodes


def test_sampler_policy_runs_episodes_with_the_embedded_model(embedded_dir, tokenizer, task):
    model = load_hf_checkpoint(embedded_dir)
    sampler = Sampler(model, pad_id=tokenizer.pad_id)
    policy = SamplerPolicy(sampler, nnx.state(model), SamplingParams(temperature=1.0),
                           tokenizer.stop_ids, jax.random.key(0))
    rollout = Rollout(tokenizer, RolloutConfig(
        group_size=2, env=BfclEnvConfig(prompt_style="compact"),
        limits=EpisodeLimits(max_reply_tokens=8, max_turn_tokens=24, max_episode_tokens=4096)))
    result = rollout([task], policy, STAGE3, progress=0.0, step=0, seed=0)
    assert len(result.episodes) == 2 and all(e.done for e in result.episodes)
    for e in result.episodes:
        tokens, mask, logprobs = e.conversation.training_arrays()
        assert mask.sum() > 0 and (logprobs[mask > 0] < 0).all()
        assert (logprobs[mask == 0] == 0).all()
        assert len(e.turns) == task.num_turns  # every turn was reached or judged
    assert sampler.compile_count() <= 8
    times = result.times
    replies = [r for e in result.episodes for t in e.turns for r in t.replies]
    assert times.policy_calls == max(len([r for t in e.turns for r in t.replies])
                                     for e in result.episodes)
    assert times.reply_tokens == sum(len(r.ids) for r in replies) == result.stats()["policy_tokens"]
    assert times.row_steps >= times.reply_tokens
    assert times.sampling_s > 0 and times.environment_s > 0 and times.slow_loop_s > 0
    assert 0 <= times.metrics()["idle_share"] < 1


def test_chunked_decoding_refills_rows_and_keeps_greedy_replies(embedded_dir, tokenizer, task):
    """decode_chunk=3 with 8-token replies: replies are sampled over several calls and rows move
    on to their next turn while others finish; greedy, every episode is the same sequence as with
    whole replies, with the same sampler logprobs."""
    model = load_hf_checkpoint(embedded_dir)
    sampler = Sampler(model, pad_id=tokenizer.pad_id)
    limits = EpisodeLimits(max_reply_tokens=8, max_turn_tokens=24, max_episode_tokens=4096)
    played = {}
    for chunk in (0, 3):
        policy = SamplerPolicy(sampler, nnx.state(model), SamplingParams(temperature=0.0),
                               tokenizer.stop_ids, jax.random.key(0))
        rollout = Rollout(tokenizer, RolloutConfig(env=COMPACT, group_size=2, limits=limits,
                                                   decode_chunk=chunk))
        played[chunk] = rollout([task], policy, STAGE3, progress=0.0, step=0, seed=0)
    whole, chunked = played[0], played[3]
    assert chunked.times.policy_calls > whole.times.policy_calls
    for a, b in zip(whole.episodes, chunked.episodes):
        (ta, ma, la), (tb, mb, lb) = a.conversation.training_arrays(), b.conversation.training_arrays()
        assert ta.tolist() == tb.tolist() and ma.tolist() == mb.tolist()
        np.testing.assert_allclose(la, lb, atol=1e-5)
    with pytest.raises(ValueError, match="decode_chunk"):
        RolloutConfig(env=COMPACT, decode_chunk=-1)


def test_idle_share_counts_the_row_steps_of_finished_replies():
    times = PlayTimes()
    times.add_call([Completion([1, 2, 3, 4], [0.0] * 4, "stop"), Completion([5], [0.0], "stop")])
    times.add_call([Completion([6, 7], [0.0] * 2, "length")])
    assert (times.policy_calls, times.reply_tokens, times.row_steps) == (2, 7, 10)
    assert times.metrics()["idle_share"] == pytest.approx(0.3)


class RecordingPolicy(ScriptedPolicy):
    """A scripted policy that keeps, per row, every id a sampler would hold: the prompt, each
    chunk it is extended with and each reply."""

    def start(self, prompts):
        self.context = [list(p) for p in prompts]

    def generate(self, rows, chunks, max_new_tokens):
        out = super().generate(rows, chunks, max_new_tokens)
        for row, chunk, completion in zip(rows, chunks, out):
            self.context[row] += list(chunk) + completion.tokens
        return out


def test_cut_off_replies_are_closed_in_the_samplers_context_too(tokenizer, task):
    """Every reply is cut off at max_reply_tokens: the stop token closing it in the training row
    must reach the sampler before the next observation, and counts against the episode cap."""
    long_reply = calls_text(task.ground_truth[0])

    def run(max_episode_tokens):
        rollout = Rollout(tokenizer, RolloutConfig(
            group_size=2, env=BfclEnvConfig(prompt_style="compact"),
            limits=EpisodeLimits(max_reply_tokens=4, max_turn_tokens=12,
                                 max_episode_tokens=max_episode_tokens)))
        episodes = rollout.episodes([task], default_stages()[0], progress=0.0, seed=0)
        policy = RecordingPolicy(tokenizer, lambda row: long_reply)
        rollout.play(episodes, policy)
        for e, context in zip(episodes, policy.context):
            segments = e.conversation.segments
            row = e.conversation.training_ids()  # nothing dropped in "mask" mode
            # the sampler saw the training row token for token; only the closing token of an
            # episode's very last reply never had to be sent
            tail = [tokenizer.reply_end_id] if segments[-1].kind == "closing" else []
            assert context + tail == row
            assert len(row) <= max_episode_tokens
        return episodes

    episodes = run(4096)
    segments = episodes[0].conversation.segments
    assert not episodes[0].truncated
    assert sum(s.kind == "closing" for s in segments) >= 3  # cut-offs did happen
    # caps that end the episode after its first observation, within a reply's reach of it
    assert [s.kind for s in segments[:4]] == ["prompt", "reply", "closing", "observation"]
    first = sum(len(s.ids) for s in segments[:4])
    for extra in (1, 2, 3, 4):
        assert all(e.truncated for e in run(first + extra))


def test_anchors_and_failed_lines_are_the_calls_that_executed(play, task, tokenizer):
    """Stage 3, training_context "mask": sample A runs [cd ok, mkdir(dir_name=5) rejected], is
    retried with [mkdir, mv] and passes; its cd stays executed, so its anchor starts with cd and
    sample B (right cd, wrong folder name) diverges at call 1, the mkdir argument."""
    assert STAGE3.training_context == "mask"
    gt = task.ground_truth[0]
    a = ["[cd(folder='document'), mkdir(dir_name=5)]", calls_text(gt[1:]), "Done."]
    b = ["[cd(folder='document'), mkdir(dir_name='tmp'), "
         "mv(source='final_report.pdf', destination='tmp')]", "Done."]
    rollout, episodes = play([task], STAGE3, [a, b], group_size=2)
    good, bad = episodes
    assert good.turns[0].retries == 1 and good.turns[0].passed
    assert bad.turns[0].passed is False
    assert [c.name for c in good.turns[0].accepted] == ["cd", "mkdir", "mv"]
    result = rollout.slow_loop(episodes, STAGE3, step=0)
    records = [r for r in result.records if r.turn == 0]
    assert len(records) == 1
    d = records[0].divergence
    assert (records[0].sample, d.kind, d.index, d.changed_keys) == (1, "argument", 1,
                                                                    ("dir_name",))
    assert (d.failed.args, d.anchor.args) == ({"dir_name": "tmp"}, {"dir_name": "temp"})
    for r in records:  # B's prefix has no executed call: the anchor step must start with cd
        assert tokenizer.decode(r.anchor_ids).startswith("[cd(folder='document')")
    assert good.turns[0].replies[0].ran == (gt[0],)  # the retried attempt's cd ran
    anchor = rollout.pool.lookup(task.id, 0, good.turns[0].state_key, now=0)
    assert anchor.calls == list(gt)
    # the retried reply's tokens say more than ran: its anchor step is the executed cd, rendered
    assert tokenizer.decode(anchor.steps[0].tokens) == "[cd(folder='document')]<|im_end|>"
