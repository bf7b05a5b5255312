"""Packed rows sharing their prefixes (`learner.share_prefixes`): the trie on hand-made rows, and
on realistic batches a layout in which every row's tokens see exactly their own prefix, are
predicted from their own previous token, and come back out whole. The losses and gradients it
gives are compared with the unpacked ones for every algorithm in test_packing.py."""

import jax
import numpy as np
import pytest
from learner_testlib import make_learner, rl_batch, sequences, shared_prefix_batch

from seetjax.batch import TokenSequences
from seetjax.learner import prefix_tree
from seetjax.learner.packing import pack_rows, pack_shared_rows, row_groups, row_lengths
from seetjax.models.transformer import segment_mask


def _keys(rows):
    return {i: prefix_tree.row_keys(np.asarray(r), np.arange(len(r))) for i, r in enumerate(rows)}


def test_a_trie_by_hand():
    """Rows 0 and 2 share [5 6 7], row 1 shares [5] with them, row 3 repeats row 0 and row 4
    shares nothing: the trie of 0-3 is [5] -> ([1 2], [6 7] -> ([8 8], [9])), in sorted order."""
    rows = [[5, 6, 7, 9], [5, 1, 2], [5, 6, 7, 8, 8], [5, 6, 7, 9], [4, 4]]
    keys = _keys(rows)
    lengths = {m: len(r) for m, r in enumerate(rows)}
    decreasing = [2, 0, 3, 1, 4]
    # 2 (5 slots), 0 (adds [9]: 1), 3 (adds nothing), 1 (adds [1 2]: 2) fill 8 slots; 4 shares
    # nothing and opens a second row
    assert prefix_tree.first_fit_shared(keys, lengths, 8, decreasing) == [[2, 0, 3, 1], [4]]
    assert prefix_tree.first_fit_shared(keys, lengths, 7, decreasing) == [[2, 0, 3], [1, 4]]
    assert prefix_tree.first_fit_shared({}, lengths, 8, decreasing) == [[2, 1], [0, 3], [4]]
    assert prefix_tree.trie_slots(keys, lengths, [0, 1, 2, 3]) == 1 + 2 + 2 + 2 + 1
    assert prefix_tree.trie_slots(keys, lengths, [1, 4]) == 5
    # two prompts, two rows each: decreasing length puts the two longest, which share nothing,
    # together (18 slots in 2 rows); the lexicographic order puts the sharing rows together
    # (15 slots in 2 rows), and the plan takes it
    two = [[1, 1, 1, 2], [1, 1, 1, 3, 3], [7, 7, 7, 8, 8], [7, 7, 7, 9]]
    keys2, lengths2 = _keys(two), {m: len(r) for m, r in enumerate(two)}
    assert prefix_tree.first_fit_shared(keys2, lengths2, 10, [1, 2, 0, 3]) == [[1, 2], [0, 3]]
    assert prefix_tree.plan_bins(keys2, lengths2, 10) == [[0, 1, 3], [2]]
    roots, paths = prefix_tree.build_forest(keys, [2, 3, 1, 0])
    (root,) = roots
    assert (root.start, root.end) == (0, 1)  # [5]
    assert [(c.start, c.end) for c in root.children] == [(1, 3), (1, 3)]  # [1 2], [6 7]
    shared = root.children[1]
    assert [(c.start, c.end) for c in shared.children] == [(3, 5), (3, 4)]  # [8 8], [9]
    assert paths[0] == paths[3] == [root, shared, shared.children[1]]
    placed, slot, next_id = prefix_tree.lay_out(roots, 2, 1)
    assert slot == 2 + 1 + 2 + 2 + 2 + 1 and next_id == 6
    assert [(p.slot, p.id, p.end_id, p.previous) for p in placed] == [
        (2, 1, 6, -1), (3, 2, 3, 2), (5, 3, 6, 2), (7, 4, 5, 6), (9, 5, 6, 6)]


def test_a_row_of_several_segments_is_laid_segment_by_segment():
    assert [(n.start, n.end) for n in prefix_tree.segment_nodes(7, np.array([1, 1, 0, 2, 2, 2, 0]))
            ] == [(0, 2), (3, 6)]


def _columns(packed, row, chunks=1):
    """Row `row`'s packed row (of all the packed rows) and the column of each of its tokens
    there: tokens t >= 1 from the index (which counts packed rows within the row's chunk), token
    0 as token 1's predecessor (the one token of a row the index does not name)."""
    index, width = packed.packing.index, packed.packing.rows.tokens.shape[1]
    n = row_lengths(np.asarray(packed.segment_ids))[row]
    local = {int(index[row, t]) // width for t in range(1, n)}
    assert len(local) == 1  # one packed row
    j = local.pop() * chunks + row % chunks
    cols = [int(index[row, t]) % width for t in range(1, n)]
    return j, [int(packed.packing.tree.previous[j, cols[0]])] + cols


@pytest.mark.parametrize("chunks,devices", [(1, 1), (2, 2)])
def test_every_row_sees_exactly_its_own_prefix(chunks, devices):
    """For every row and token t: the token's slot holds it (position kept), is predicted from
    the slot of token t - 1, and sees exactly the slots of tokens 0..t of its row under the
    nested segment mask; the rows sit in their own (chunk, device block) groups, and the slots
    computed are the trie's (fewer than the real tokens)."""
    batch = shared_prefix_batch(seed=3, rows=16)
    seqs = batch.sequences
    packed = pack_shared_rows(seqs, chunks, devices)
    rows, tree = packed.packing.rows, packed.packing.tree
    n, width = seqs.shape
    assert rows.shape[0] % (chunks * devices) == 0 and rows.shape[1] == width
    mask = np.asarray(segment_mask(rows.segment_ids, tree.ends))
    flat_tokens, flat_positions = rows.tokens.reshape(-1), rows.positions.reshape(-1)
    row_group, packed_group = row_groups(n, chunks, devices), row_groups(len(rows.tokens),
                                                                         chunks, devices)
    lengths = row_lengths(np.asarray(seqs.segment_ids))
    for i in np.flatnonzero(lengths > 1):
        j, cols = _columns(packed, i, chunks)
        assert packed_group[j] == row_group[i]
        for t, col in enumerate(cols):
            slot = j * width + col
            assert flat_tokens[slot] == seqs.tokens[i, t]
            assert flat_positions[slot] == seqs.positions[i, t]
            if t:
                assert tree.previous[j, col] == cols[t - 1]
            assert set(np.flatnonzero(mask[j, col])) == set(cols[:t + 1])
    real = np.count_nonzero(np.asarray(seqs.segment_ids))
    assert np.count_nonzero(rows.segment_ids) < real
    assert np.count_nonzero(rows.segment_ids) < np.count_nonzero(
        pack_rows(seqs, chunks, devices).packing.rows.segment_ids)


def test_targets_and_the_index_read_every_row_back():
    """The packed loss mask marks the slot of every row's target token; `unpack` of the packed
    tokens gives every row's tokens t >= 1 back, 0 elsewhere."""
    seqs = shared_prefix_batch(seed=4, rows=16).sequences
    packed = pack_shared_rows(seqs)
    rows, index = packed.packing.rows, packed.packing.index
    tokens = np.asarray(seqs.tokens)
    real = np.asarray(seqs.segment_ids) != 0
    read = real & (np.arange(tokens.shape[1])[None] >= 1)
    got = np.asarray(packed.packing.unpack(rows.tokens))
    np.testing.assert_array_equal(got, np.where(read, tokens, 0))
    targets = (np.asarray(seqs.loss_mask) > 0) & read
    assert np.all(rows.loss_mask.reshape(-1)[index[targets]] == 1)
    # and no slot is marked that no row's target reads
    marked = set(np.flatnonzero(rows.loss_mask.reshape(-1) * (packed.packing.tree.previous
                                                              .reshape(-1) >= 0)))
    assert marked == set(index[targets].tolist())


def test_rows_of_several_segments_and_rows_that_share_nothing():
    """Rows that share nothing get plain packing's layout, without a tree; a row of several
    segments (packed SFT dialogs) is laid segment by segment beside rows that share."""
    seqs = sequences(np.random.RandomState(0), 8, 24, padding_rows=1)
    plain, shared = pack_rows(seqs), pack_shared_rows(seqs)
    assert shared.packing.tree is None
    for a, b in zip(jax.tree.leaves(shared.packing), jax.tree.leaves(plain.packing)):
        np.testing.assert_array_equal(a, b)
    rows = TokenSequences(tokens=np.array([[3, 4, 5, 6, 7, 8], [3, 4, 5, 9, 0, 0],
                                           [3, 4, 5, 9, 1, 0]]),
                          positions=np.array([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 0, 0],
                                              [0, 1, 2, 3, 4, 0]]),
                          segment_ids=np.array([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 0, 0],
                                                [1, 1, 1, 1, 1, 0]]),
                          loss_mask=np.ones((3, 6), np.float32))
    packed = pack_shared_rows(rows)
    assert packed.packing.tree is not None
    np.testing.assert_array_equal(packed.packing.unpack(packed.packing.rows.tokens),
                                  [[0, 4, 5, 0, 7, 8], [0, 4, 5, 9, 0, 0], [0, 4, 5, 9, 1, 0]])
    # row 0, of two segments, is laid whole (6 slots); rows 1 and 2 share [3 4 5 9] (5 slots)
    assert np.count_nonzero(packed.packing.rows.segment_ids) == 11


def test_the_fallback_never_takes_more_rows_than_plain_packing():
    for seed in range(6):
        batch = shared_prefix_batch(seed=seed, rows=16) if seed % 2 else rl_batch(seed=seed)
        for chunks in (1, 2):
            shared = pack_shared_rows(batch.sequences, chunks)
            plain = pack_rows(batch.sequences, chunks)
            assert shared.packing.rows.shape[0] <= plain.packing.rows.shape[0]


def test_the_update_reports_the_share_saved(model):
    batch = shared_prefix_batch(seed=5, rows=16)
    learner, state = make_learner(model, {"algorithm": "grpo"})
    _, metrics = learner.update(state, batch)
    packed = learner.ready(batch).sequences
    real = np.count_nonzero(batch.sequences.segment_ids)
    computed = np.count_nonzero(packed.packing.rows.segment_ids)
    assert metrics["shared_prefix_share"] == pytest.approx(1 - computed / real)
    assert metrics["shared_prefix_share"] > 0.1
    assert metrics["padding_share"] == pytest.approx(1 - computed / packed.packing.rows.tokens.size)
