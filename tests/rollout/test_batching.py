"""Rollout -> TrajectoryBatch -> one learner step: the contract between the two sides (a tiny
random model on the embedded tokenizer: what is checked does not depend on trained weights)."""

import jax
import numpy as np
import pytest
from flax import nnx

from seetjax.learner.config import learner_config
from seetjax.learner.learner import create_learner
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rollout.batching import trajectory_batch
from seetjax.rollout.branching import BranchConfig
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.runtime.sharding import make_mesh
from seetjax.seet.config import default_stages
from tests.rollout.scripted import ScriptedPolicy
from tests.rollout.test_loop import COMPACT, replay

STAGE3 = default_stages()[2]


def new_learner(model_dir, **fields):
    model = load_hf_checkpoint(model_dir)
    config = learner_config({"algorithm": "grpo", "counterfactual_weight": 0.5,
                             "optimizer": {"learning_rate": 1e-4}, **fields})
    return create_learner(model, config, mesh=make_mesh(1, 1, 1, jax.devices()[:1]))


@pytest.fixture(scope="module")
def learner(small_dir):
    return new_learner(small_dir)


def test_batch_rows_masks_and_pairs(play, task, tokenizer):
    rollout, episodes = play([task], STAGE3, [replay(task), replay(task, skip_turn=1),
                                              ["[ls(a=True)]", "Done."]], group_size=3)
    result = rollout.slow_loop(episodes, STAGE3, step=1)
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id, row_multiple=4, max_pairs=4)
    seqs = batch.sequences
    assert seqs.tokens.shape[0] == 4 and seqs.tokens.shape[1] & (seqs.tokens.shape[1] - 1) == 0
    assert (seqs.segment_ids[3] == 0).all() and batch.group_ids.tolist() == [0, 0, 0, -1]
    for i, e in enumerate(episodes):
        tokens, mask, logprobs = e.conversation.training_arrays()
        np.testing.assert_array_equal(seqs.tokens[i, :len(tokens)], tokens)
        np.testing.assert_array_equal(seqs.loss_mask[i, :len(mask)], mask)
        np.testing.assert_array_equal(batch.old_logprobs[i, :len(logprobs)], logprobs)
    np.testing.assert_allclose(batch.rewards[:3], result.rewards())
    pairs = batch.pairs
    n = len(result.records)
    assert 1 <= n <= 4 and pairs.weights.tolist() == [1.0] * n + [0.0] * (4 - n)
    r = result.records[0]
    chosen_tokens = pairs.chosen.tokens[0][pairs.chosen.loss_mask[0] > 0].tolist()
    rejected_tokens = pairs.rejected.tokens[0][pairs.rejected.loss_mask[0] > 0].tolist()
    assert chosen_tokens == list(r.anchor_ids) and rejected_tokens == list(r.failed_ids)
    # on a data axis wider than max_pairs, the pairs are padded to the row multiple too (two
    # pairs on eight devices stopped the first update that had any)
    wide = trajectory_batch(result, pad_id=tokenizer.pad_id, row_multiple=8, max_pairs=2)
    assert wide.pairs.chosen.tokens.shape[0] == wide.pairs.rejected.tokens.shape[0] == 8
    assert wide.pairs.weights.tolist() == [1.0] * min(n, 2) + [0.0] * (8 - min(n, 2))
    assert pairs.chosen.tokens[0][:len(r.prefix_ids)].tolist() == list(r.prefix_ids)


def test_one_learner_step_on_rollout_batches(play, task, tokenizer, learner):
    learner, state = learner
    rollout, episodes = play([task], STAGE3, [replay(task), replay(task, skip_turn=1)],
                             group_size=2)
    result = rollout.slow_loop(episodes, STAGE3, step=1)
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id, row_multiple=learner.batch_divisor,
                             max_pairs=2, length=2048)
    before = nnx.to_pure_dict(state.params)["embed_tokens"]["embedding"].copy()
    state, metrics = learner.update(state, batch)
    assert np.isfinite(metrics["loss"]) and metrics["cf_nll"] > 0
    assert not np.array_equal(np.asarray(nnx.to_pure_dict(state.params)["embed_tokens"][
        "embedding"]), before)
    # a batch with no records (padding pairs only) reuses the compiled step
    _, same = play([task], STAGE3, [replay(task), replay(task)], group_size=2)
    empty = trajectory_batch(rollout.slow_loop(same, STAGE3, step=2), pad_id=tokenizer.pad_id,
                             row_multiple=learner.batch_divisor, max_pairs=2, length=2048)
    assert empty.pairs.weights.sum() == 0
    state, metrics = learner.update(state, empty)
    assert np.isfinite(metrics["loss"])

    def layout(b, part):  # what the step compiles for: the tree's structure and leaf shapes
        ready = getattr(learner.ready(b), part)
        return jax.tree.structure(ready), tuple(np.shape(x) for x in jax.tree.leaves(ready))

    # padding pairs are laid out as real ones; the episodes' packed rows (the second batch's two
    # samples are alike and share their whole rows) may take another bucket, compiled once
    assert layout(batch, "pairs") == layout(empty, "pairs")
    assert learner.compile_count() == len({layout(b, "sequences") for b in (batch, empty)})


def test_step_keys_mark_each_reply_with_its_state(play, task, tokenizer):
    # two samples agree on turn 0 and on turn 1's first reply; then one skips turn 1's calls
    rollout, episodes = play([task], STAGE3, [replay(task), replay(task, skip_turn=1)],
                             group_size=2)
    batch = trajectory_batch(rollout.slow_loop(episodes, STAGE3, step=1),
                             pad_id=tokenizer.pad_id, row_multiple=4)
    keys = np.asarray(batch.step_keys)
    assert keys.dtype == np.int32 and (keys[2:] == -1).all()  # padding rows: no steps
    firsts = []
    for i, episode in enumerate(episodes):
        spans = episode.step_keys()
        on = np.zeros(keys.shape[1], bool)
        for start, end, _ in spans:
            on[start:end] = True
            assert len(set(keys[i, start:end])) == 1  # one key over a reply's tokens
        assert (keys[i, ~on] == -1).all() and (keys[i, on] >= 0).all()
        assert on[np.asarray(batch.sequences.loss_mask[i]) > 0].all()  # every trained token
        assert len(spans) == sum(s.kind == "reply" for s in episode.conversation.segments)
        firsts.append([keys[i, start] for start, _, _ in spans])
    (a, b) = firsts
    assert a[:3] == b[:3] and a[3] != b[3] and len(set(a)) == len(a)


def test_a_gigpo_step_on_rollout_batches(play, task, tokenizer, small_dir):
    rollout, episodes = play([task], STAGE3, [replay(task), ["[pwd()]"] + replay(task)],
                             group_size=2)
    batch = trajectory_batch(rollout.slow_loop(episodes, STAGE3, step=1),
                             pad_id=tokenizer.pad_id, length=2048)
    model = load_hf_checkpoint(small_dir)
    learner, state = create_learner(model, learner_config({
        "algorithm": "gigpo", "loss": {"kl_coef": 0.0}, "optimizer": {"learning_rate": 1e-4}}),
        mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    assert batch.rewards.tolist() == [1.0, 1.0]  # GRPO's advantages: all 0
    before = nnx.to_pure_dict(state.params)["embed_tokens"]["embedding"].copy()
    state, metrics = learner.update(state, batch)
    assert np.isfinite(metrics["loss"]) and metrics["advantage_abs"] > 0  # GiGPO's steps
    assert not np.array_equal(np.asarray(nnx.to_pure_dict(state.params)["embed_tokens"][
        "embedding"]), before)
    with pytest.raises(ValueError, match="TrajectoryBatch.step_keys is needed"):
        learner.update(state, batch.replace(step_keys=None))
    with pytest.raises(ValueError, match=r"TrajectoryBatch.step_keys has shape \(2, 5\)"):
        learner.update(state, batch.replace(step_keys=batch.step_keys[:, :5]))
    turns, _ = create_learner(model, learner_config({  # refused before compiling
        "algorithm": "gigpo", "advantage": {"horizon": "turn"}}),
        mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    with pytest.raises(ValueError, match="TrajectoryBatch.turn_starts is needed: gigpo's "
                                         "returns with horizon 'turn'"):
        turns.update(state, batch.replace(turn_starts=None))
    with pytest.raises(ValueError, match=r"TrajectoryBatch.turn_starts has shape \(2, 5\)"):
        turns.update(state, batch.replace(turn_starts=batch.turn_starts[:, :5]))


def test_dpo_pairs_from_rollouts_train(play, task, tokenizer, small_dir):
    from seetjax.rollout.preferences import best_worst_pairs, rollout_preferences
    rollout, episodes = play([task], STAGE3, [replay(task, skip_turn=1), replay(task),
                                              ["Done."] * 8], group_size=3)
    result = rollout.slow_loop(episodes, STAGE3, step=1)
    assert best_worst_pairs(result) == [(1, 2)]  # the full replay over the one that did nothing
    batch = rollout_preferences(result, tokenizer.pad_id, row_multiple=2, length=2048)
    chosen = batch.pairs.chosen
    tokens, mask, _ = episodes[1].conversation.training_arrays()
    np.testing.assert_array_equal(chosen.tokens[0, :len(tokens)], tokens)
    np.testing.assert_array_equal(chosen.loss_mask[0, :len(mask)], mask)
    assert batch.pairs.weights.tolist() == [1.0, 0.0] and batch.sequences is None
    model = load_hf_checkpoint(small_dir)
    learner, state = create_learner(model, learner_config({"algorithm": "dpo"}),
                                    mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    state, metrics = learner.update(state, batch)
    assert np.isfinite(metrics["loss"]) and metrics["loss"] == pytest.approx(np.log(2), rel=1e-3)


def test_ppo_step_on_rollout_batches(play, task, tokenizer, small_dir):
    rollout, episodes = play([task], STAGE3, [replay(task), replay(task, skip_turn=1)],
                             group_size=2)
    batch = trajectory_batch(rollout.slow_loop(episodes, STAGE3, step=1),
                             pad_id=tokenizer.pad_id, length=2048)
    model = load_hf_checkpoint(small_dir, value_head=True)
    learner, state = create_learner(model, learner_config({"algorithm": "ppo"}),
                                    mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    state, metrics = learner.update(state, batch)
    assert np.isfinite(metrics["loss"]) and "loss/value" in metrics


def test_pairs_are_drawn_uniformly_over_all_records_and_reproducibly(play, task, tokenizer):
    from seetjax.rl.trainer import TrainRun
    from seetjax.rollout.batching import sample_records

    records = list(range(40))  # stands for 40 records in episode order (10 tasks x 4 samples)
    draw = sample_records(records, 8, (0, 3, 0))
    assert draw == sample_records(records, 8, (0, 3, 0))  # a resumed step draws the same pairs
    assert draw != sample_records(records, 8, (0, 4, 0))
    assert len(set(draw)) == 8 and draw == sorted(draw)  # without replacement, episode order
    counts = np.bincount([i for step in range(2000) for i in sample_records(records, 8,
                                                                            (0, step, 0))],
                         minlength=40)
    assert counts.min() > 0.8 * 400 and counts.max() < 1.2 * 400  # 2000 * 8 / 40 each
    assert sample_records(records[:5], 8, (0, 1, 0)) == records[:5]
    assert sample_records(records, 8, None) == records[:8]
    # in a batch: the trained pairs are a seeded draw, counted in the trainer's metrics
    rollout, episodes = play([task], STAGE3, [replay(task)] + [replay(task, skip_turn=t)
                                                               for t in (0, 1, 2, 3)],
                             group_size=5)
    result = rollout.slow_loop(episodes, STAGE3, step=1)
    assert len(result.records) == 4
    batch = trajectory_batch(result, pad_id=tokenizer.pad_id, max_pairs=2, pair_seed=(0, 1, 0))
    picked = sample_records(result.records, 2, (0, 1, 0))
    for k, r in enumerate(picked):
        chosen = batch.pairs.chosen.tokens[k][batch.pairs.chosen.loss_mask[k] > 0].tolist()
        assert chosen == list(r.anchor_ids)
    run = type("Run", (), {"plan": type("Plan", (), {"learner": type(
        "Learner", (), {"term": staticmethod(lambda name: None)})})})()
    assert TrainRun._record_counts(run, result, batch) == {"records_available": 4.0,
                                                           "records_trained": 2.0}


def test_branch_rows_keep_the_learner_compiled_once(tokenizer, task, small_dir):
    """Branching (k=1, one fork point per episode) gives a step 1 or 2 rows per original episode;
    `rows_per_episode` pads every step to 2, so a fresh learner compiles one program for both
    (unpacked rows: packing has its own few shapes, `seetjax.learner.packing`)."""
    learner, state = new_learner(small_dir, pack_rows=False)  # the module's is donated
    branch = BranchConfig(points="every_call", k=1, max_forks=1)
    rollout = Rollout(tokenizer, RolloutConfig(group_size=1, env=COMPACT, branch=branch))
    queues = {}

    def step(scripts):
        queues.update(enumerate(list(s) for s in scripts))
        episodes = rollout.episodes([task], STAGE3, progress=0.0, seed=0)
        rollout.play(episodes, ScriptedPolicy(tokenizer, lambda row: queues[row].pop(0)
                                              if queues.get(row) else "Done."))
        return rollout.slow_loop(episodes, STAGE3, step=1)

    forked = step([["[cd(folder='document')]", "[mkdir(dir_name='temp')]"], []])
    plain = step([["Done."]])
    # the second call ran but forked nothing: max_forks
    assert [e.branch for e in forked.episodes] == [False, True]
    assert [e.branch for e in plain.episodes] == [False]
    stats, tokens = forked.stats(), [e.stats()["policy_tokens"] for e in forked.episodes]
    assert stats["branch_rows"] == 1.0 and stats["branch_policy_tokens"] == tokens[1] > 0
    assert stats["policy_tokens"] == sum(tokens) and plain.stats()["branch_rows"] == 0.0
    batches = [trajectory_batch(r, pad_id=tokenizer.pad_id, row_multiple=learner.batch_divisor,
                                max_pairs=2, length=2048, rows_per_episode=branch.rows_per_episode)
               for r in (forked, plain)]
    assert batches[0].sequences.tokens.shape == batches[1].sequences.tokens.shape == (2, 2048)
    assert (batches[1].sequences.segment_ids[1] == 0).all() and batches[1].group_ids[1] == -1
    assert batches[0].group_ids.tolist() == [0, 0]
    for batch in batches:
        state, metrics = learner.update(state, batch)
        assert np.isfinite(metrics["loss"])
    assert learner.compile_count() == 1
    with pytest.raises(ValueError, match=r"trajectory_batch.rows_per_episode=1: 1 original "
                                         r"episodes and 1 branch rows do not fit in 1 rows"):
        trajectory_batch(forked, pad_id=tokenizer.pad_id, rows_per_episode=1)
