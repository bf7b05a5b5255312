"""Packed rows (`learner.pack_rows`): the packer's layout, and for every algorithm the same loss,
metrics and gradients as one trajectory per row."""

import numpy as np
import pytest
from learner_testlib import (
    PARITY_CONFIG,
    VARIANTS,
    VOCAB,
    assert_same_update,
    flat_arrays,
    make_learner,
    moved_off_reference,
    rl_batch,
    sequences,
    shared_prefix_batch,
    spec_id,
)

from seetjax import losses
from seetjax.batch import Packing, PreferencePairs, TokenSequences, target_mask
from seetjax.learner import ALGORITHMS, learner_config
from seetjax.learner.objective import pair_riders
from seetjax.learner.packing import (
    bucket_rows,
    first_fit_decreasing,
    pack_batch,
    pack_rows,
    pack_shared_rows,
    pair_placement,
    regrouped,
    row_groups,
    row_lengths,
    sharing_order,
)


def test_first_fit_decreasing_and_buckets():
    assert first_fit_decreasing([3, 0, 5, 2, 5, 4], 8) == [[2, 0], [4, 3], [5]]
    assert [bucket_rows(n, 100) for n in range(1, 14)] == [1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12,
                                                           12, 16]
    assert bucket_rows(7, 7) == 7 and bucket_rows(0, 4) == 1
    # few shapes, hence few compilations: 1, 2, 3, 4, 6, 8, ..., 48, 64
    assert len({bucket_rows(n, 64) for n in range(65)}) == 12


@pytest.mark.parametrize("chunks,devices", [(1, 1), (2, 2), (4, 1)])
def test_packed_rows_hold_every_row_in_its_own_chunk_and_device_block(chunks, devices):
    """Each row's tokens (positions kept) sit in a packed row of its own (chunk, device block)
    group, alone in their segments; split into chunks as `RowChunks` splits them, each chunk's
    `index` reads its own rows' tokens back out of its own packed rows."""
    rng = np.random.RandomState(0)
    seqs = sequences(rng, 16, 24, padding_rows=2)
    packed = pack_rows(seqs, chunks, devices)
    rows, index = packed.packing.rows, packed.packing.index
    n, width = seqs.shape
    assert rows.shape[1] == width and rows.shape[0] < n
    assert rows.shape[0] % (chunks * devices) == 0
    tokens, segs = np.asarray(seqs.tokens), np.asarray(seqs.segment_ids)
    lengths = row_lengths(segs)
    zero = rows.shape[0] // chunks * width
    read = (np.arange(width)[None] >= 1) & (segs != 0)
    assert np.all(index[~read] == zero) and np.all(index[read] < zero)
    assert rows.segment_ids.astype(bool).sum() == lengths.sum()  # every real token once
    row_group, packed_group = row_groups(n, chunks, devices), row_groups(len(rows.tokens),
                                                                         chunks, devices)
    owners = {}
    for i in np.flatnonzero(lengths > 1):
        local = index[i, 1] // width  # the packed row, counted within the chunk
        j = local * chunks + i % chunks
        assert packed_group[j] == row_group[i]
        start = index[i, 1] % width - 1
        span = slice(start, start + lengths[i])
        np.testing.assert_array_equal(rows.tokens[j, span], tokens[i, :lengths[i]])
        np.testing.assert_array_equal(rows.positions[j, span], seqs.positions[i, :lengths[i]])
        np.testing.assert_array_equal(rows.loss_mask[j, span], seqs.loss_mask[i, :lengths[i]])
        segment = int(rows.segment_ids[j, start])
        assert (j, segment) not in owners and np.all(rows.segment_ids[j, span] == segment)
        owners[j, segment] = i
    for c in range(chunks):
        chunk = Packing(rows=rows.replace(tokens=rows.tokens[c::chunks]), index=index[c::chunks])
        got = np.asarray(chunk.unpack(rows.tokens[c::chunks]))
        np.testing.assert_array_equal(got, np.where(read[c::chunks], tokens[c::chunks], 0))


def test_packing_is_deterministic():
    batch = rl_batch(seed=3, rows=16, pairs=8)
    first, second = pack_batch(batch, 2, 2), pack_batch(batch, 2, 2)
    a, b = flat_arrays(first), flat_arrays(second)
    assert a.keys() == b.keys() and any("packing" in k for k in a)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _step_rewards(batch):
    """A reward on each row's first and last trained tokens (process rewards)."""
    mask = np.asarray(target_mask(batch.sequences))
    first = (np.cumsum(mask, 1) == 1) & (mask > 0)
    last = (np.cumsum(mask[:, ::-1], 1)[:, ::-1] == 1) & (mask > 0)
    marks = (first | last).astype(np.float32)
    rewards = np.random.RandomState(0).randn(*mask.shape).astype(np.float32) * marks
    return batch.replace(token_rewards=rewards, reward_mask=marks)


# Every preset (a new one is picked up here), with the fields some of them need, then the
# variants whose code paths the presets leave out (learner_testlib.VARIANTS).
PRESETS = [{"algorithm": name, **({"loss": {"norm_constant": 16.0}} if name == "dr_grpo" else {})}
           for name in sorted(ALGORITHMS)]
STEP_REWARDS = ("grpo", "ppo")  # process rewards: group normalisation, GAE credit


def test_the_cases_cover_every_loss_and_estimator():
    configs = [learner_config(s) for s in PRESETS + VARIANTS]
    assert {t.name for c in configs for t in c.losses} == set(losses.names())
    assert {c.advantage for c in configs} - {None} == set(losses.names("advantage"))


def _unpacked(batch):
    """A batch the learner has made ready, without its packing: the same rows in the same
    order (as the packed learner reordered them) for an unpacked learner."""
    def strip(s):
        return s.replace(packing=None, target_width=0)

    pairs = batch.pairs
    return batch.replace(sequences=strip(batch.sequences), pairs=None if pairs is None else
                         pairs.replace(chosen=strip(pairs.chosen), rejected=strip(pairs.rejected)))


@pytest.mark.parametrize("spec", PRESETS + VARIANTS, ids=spec_id)
def test_packed_rows_give_the_unpacked_loss_and_gradients(spec, model, value_model):
    """Packed with shared prefixes (the default): a group's prompt, branch rows, a repeated row,
    a row that is a prefix of another, pairs that begin alike; with several micro-batches the
    packed learner first regroups rows within their mini-batch, and the unpacked one is given
    the rows in that order (so that every micro-batch, and the gradient variance between them,
    agree too)."""
    model = value_model if spec["algorithm"] == "ppo" else model
    batches = [shared_prefix_batch(seed=7, rows=16, pairs=8)]
    if spec["algorithm"] in STEP_REWARDS:
        batches.append(_step_rewards(batches[0]))
    learner, state = make_learner(model, {**spec, "pack_rows": True})
    packed = [learner.gradients(moved_off_reference(state), b) for b in batches]
    ready = [learner.ready(b) for b in batches]
    riders = pair_riders(learner.config)
    for name in ("sequences", "chosen", "rejected"):
        seqs = ready[0].sequences if name == "sequences" else getattr(ready[0].pairs, name)
        if name in riders:  # laid in the trajectories' packed rows, none of its own
            assert seqs.packing.rows is None
        else:
            assert len(seqs.packing.rows.tokens) < len(seqs.tokens)
    # the prefixes were shared: fewer slots computed than real tokens (the riders' included)
    seqs = ready[0].sequences
    real = sum(np.count_nonzero(s.segment_ids) for s in
               [seqs] + [getattr(ready[0].pairs, name) for name in riders])
    assert np.count_nonzero(seqs.packing.rows.segment_ids) < real
    learner, state = make_learner(model, {**spec, "pack_rows": False})
    unpacked = [learner.gradients(moved_off_reference(state), _unpacked(r)) for r in ready]
    assert learner.ready(batches[0]).sequences.packing is None
    for expected, actual in zip(unpacked, packed):
        assert_same_update(expected, actual)


def _pairs_of(seqs, sources, rng):
    """SEET-like pairs: pair j cuts trajectory sources[j] after a point; chosen = that prefix +
    a 4-token step of its own (its first token unlike the trajectory's), rejected = the
    trajectory's own next 2 tokens (a prefix of it, as a failed step is). Also the steps'
    lengths."""
    chosen, rejected, chosen_masks, rejected_masks, steps = [], [], [], [], []
    for r in sources:
        row = np.asarray(seqs.tokens[r])[np.asarray(seqs.segment_ids[r]) != 0].tolist()
        cut = rng.randint(len(row) // 2, len(row) - 2)
        step = rng.randint(1, VOCAB, 4).tolist()
        step[0] = row[cut] % (VOCAB - 1) + 1  # never the trajectory's next token
        chosen.append(row[:cut] + step)
        chosen_masks.append([0.0] * cut + [1.0] * len(step))
        rejected.append(row[:cut + 2])
        rejected_masks.append([0.0] * cut + [1.0] * 2)
        steps.append(len(step))
    width = seqs.shape[1]
    return PreferencePairs(chosen=TokenSequences.from_rows(chosen, chosen_masks, width),
                           rejected=TokenSequences.from_rows(rejected, rejected_masks, width),
                           weights=np.ones(len(sources), np.float32)), steps


def _riding_pairs_batch(sources=(1, 0, 3, 2), seed=5, width=256):
    """`shared_prefix_batch` with the pairs of `_pairs_of`, its rows `width` wide: a group's
    rows fit one packed row, as a rollout's long rows hold several."""
    batch = shared_prefix_batch(seed=seed, rows=16)
    seqs = batch.sequences
    pad = ((0, 0), (0, width - seqs.shape[1]))
    batch = batch.replace(sequences=seqs.replace(**{
        f: np.pad(np.asarray(getattr(seqs, f)), pad)
        for f in ("tokens", "positions", "segment_ids", "loss_mask")}),
        old_logprobs=np.pad(batch.old_logprobs, pad),
        step_keys=np.pad(batch.step_keys, pad, constant_values=-1))
    pairs, steps = _pairs_of(batch.sequences, sources, np.random.RandomState(seed))
    return batch.replace(pairs=pairs), steps


def test_pairs_ride_in_the_trajectories_rows_at_the_cost_of_their_own_steps():
    """SEET's pairs (a failed trajectory's prefix, then a step) laid in the trajectories'
    packed rows: each in the group of its trajectory, though given in other groups' rows, so
    that the packed rows hold exactly the trajectories' slots plus each chosen step (the
    rejected steps are the trajectories' own tokens); each rider's `index` reads its tokens
    back out of its chunk's packed rows."""
    batch, steps = _riding_pairs_batch()
    chunks = 2
    alone = pack_shared_rows(batch.sequences, chunks).packing.rows
    ready = pack_batch(batch, chunks, share_prefixes=True, riders=("chosen", "rejected"))
    rows = ready.sequences.packing.rows
    assert np.count_nonzero(rows.segment_ids) == np.count_nonzero(alone.segment_ids) + sum(steps)
    order = pair_placement(batch.sequences, batch.pairs.chosen, chunks, 1, chunks)
    sources = np.array((1, 0, 3, 2))
    assert np.array_equal(sources[order] % 2, np.arange(4) % 2)  # with its trajectory's group
    width = rows.shape[1]
    for name in ("chosen", "rejected"):
        rider = getattr(ready.pairs, name)
        assert rider.packing.rows is None
        expected = np.asarray(getattr(batch.pairs, name).tokens)[order]
        read = (np.arange(width)[None] >= 1) & (np.asarray(rider.segment_ids) != 0)
        for c in range(chunks):
            got = Packing(rows=rows, index=rider.packing.index[c::chunks]).unpack(
                rows.tokens[c::chunks])
            np.testing.assert_array_equal(np.asarray(got), np.where(read[c::chunks],
                                                                    expected[c::chunks], 0))


@pytest.mark.parametrize("devices,sources", [(1, (1, 0, 3, 2, 5, 4, 7, 6)),
                                             (2, (8, 9, 10, 11, 0, 1, 2, 3))])
def test_pair_placement_moves_pairs_to_their_trajectories_within_their_mini_batch(devices,
                                                                                  sources):
    """2 updates x 2 micro-batches over 1 or 2 device blocks; pair j is given in a row of
    another group than its trajectory's (sources[j]), that group in its own mini-batch: each
    moves to its trajectory's group, and so stays in its mini-batch."""
    rng = np.random.RandomState(2)
    seqs = sequences(rng, 16, 32)
    chosen = _pairs_of(seqs, sources, rng)[0].chosen
    chunks = 4
    groups, seq_groups = row_groups(8, chunks, devices), row_groups(16, chunks, devices)
    mini_batch = lambda g: g // devices // 2  # noqa: E731 - group: chunk * devices + block
    given = [seq_groups[r] for r in sources]
    assert all(g != h and mini_batch(g) == mini_batch(h) for g, h in zip(given, groups))
    order = pair_placement(seqs, chosen, chunks, devices, 2)
    assert sorted(order.tolist()) == list(range(8))
    assert [given[i] for i in order] == list(groups)


@pytest.mark.parametrize("spec", [PARITY_CONFIG, {"algorithm": "grpo", "counterfactual_weight": 0.5,
                                                  "mini_batches": 2, "micro_batches": 2}],
                         ids=["chosen+rejected", "chosen"])
def test_riding_pairs_give_the_unpacked_loss_and_gradients(spec, model):
    """The counterfactual term with its preference (chosen and rejected ride, their reference
    sums and the trajectories' KL reference from one pass) and without it (chosen alone rides;
    2 mini-batches of 2): the loss, metrics and gradients of the unpacked learner on the same
    rows."""
    batch, _ = _riding_pairs_batch()
    learner, state = make_learner(model, {**spec, "pack_rows": True})
    state = moved_off_reference(state)
    ready = learner.ready(batch)
    riders = pair_riders(learner.config)
    assert riders == (("chosen", "rejected") if spec is PARITY_CONFIG else ("chosen",))
    assert pair_riders(learner_config({**spec, "pairs_with_trajectories": False})) == ()
    assert all(getattr(ready.pairs, name).packing.rows is None for name in riders)
    packed = learner.gradients(state, batch)
    learner, state = make_learner(model, {**spec, "pack_rows": False})
    unpacked = learner.gradients(moved_off_reference(state), _unpacked(ready))
    assert_same_update(unpacked, packed)


def test_regrouping_rows_changes_no_update(model):
    """Regrouping a mini-batch's rows across micro-batches (`sharing_order`) leaves the loss
    and the gradients as they were; only the variance between micro-batches may change."""
    spec = {"algorithm": "grpo", "mini_batches": 2, "micro_batches": 2, "pack_rows": False}
    batch = shared_prefix_batch(seed=9, rows=16, pairs=8)
    order = sharing_order(batch.sequences, 2, 2)
    assert sorted(order) == list(range(16)) and np.any(order != np.arange(16))
    assert np.all(order % 4 // 2 == np.arange(16) % 4 // 2)  # every row keeps its mini-batch
    learner, state = make_learner(model, spec)
    state = moved_off_reference(state)
    assert np.array_equal(regrouped(batch, 2, 2, 1).sequences.tokens,
                          np.asarray(batch.sequences.tokens)[order])
    (grads, metrics), (other_grads, other) = (
        learner.gradients(state, b) for b in (batch, regrouped(batch, 2, 2, 1)))
    metrics.pop("grad_variance"), other.pop("grad_variance")
    assert_same_update((grads, metrics), (other_grads, other))


@pytest.mark.parametrize("share", [False, True], ids=["rows", "shared_prefixes"])
def test_updates_over_mini_batches_train_the_same_parameters(model, share):
    """Two mini-batches of two micro-batches: each update sees the trajectories it sees
    unpacked, so the parameters after both agree (rows packed alone, or sharing prefixes)."""
    spec = {"algorithm": "dapo", "mini_batches": 2, "micro_batches": 2,
            "optimizer": {"learning_rate": 1e-3}, "share_prefixes": share}
    batch = shared_prefix_batch(seed=8, rows=16)
    params = []
    for pack in (False, True):
        learner, state = make_learner(model, {**spec, "pack_rows": pack})
        state, metrics = learner.step(state, batch)
        assert int(state.step) == 2
        params.append(flat_arrays(state.params))
    # Adam divides by the gradient's scale, so the summation order's rounding (micro-batches
    # regrouped when sharing) reaches the parameters at ~1e-6 of a 1e-3 step
    for key in params[0]:
        np.testing.assert_allclose(params[1][key], params[0][key], rtol=1e-5, atol=5e-6,
                                   err_msg=key)


def test_padding_shares_and_bounded_compiles(model):
    learner, state = make_learner(model, {"algorithm": "grpo"})
    shapes = set()
    for seed, length in enumerate((24, 24, 32, 24)):
        batch = rl_batch(seed=seed, rows=16, length=length)
        state, metrics = learner.update(state, batch)
        seqs = batch.sequences
        real = (np.asarray(seqs.segment_ids) != 0).sum()
        rows = learner.ready(batch).sequences.packing.rows.tokens
        shapes.add(rows.shape)
        assert metrics["padding_share_unpacked"] == pytest.approx(1 - real / seqs.tokens.size)
        assert metrics["padding_share"] == pytest.approx(1 - real / rows.size)
        assert metrics["padding_share"] < metrics["padding_share_unpacked"]
    assert learner.compile_count() == len(shapes)


def test_pack_rows_is_validated():
    for field in ("pack_rows", "pairs_with_trajectories"):
        with pytest.raises(ValueError, match=field):
            learner_config({"algorithm": "grpo", field: "yes"})
