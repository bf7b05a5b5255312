"""TrajectoryBatch helpers: padding rows, and which tokens can carry a loss."""

import numpy as np
import pytest

from seetjax.batch import TokenSequences, row_mask, target_mask


def test_from_rows_pads_right_and_numbers_positions():
    seqs = TokenSequences.from_rows([[5, 6, 7], []], [[0, 1, 1], []], length=4, pad_id=9)
    np.testing.assert_array_equal(seqs.tokens, [[5, 6, 7, 9], [9, 9, 9, 9]])
    np.testing.assert_array_equal(seqs.positions, [[0, 1, 2, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(seqs.segment_ids, [[1, 1, 1, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(row_mask(seqs), [1, 0])
    with pytest.raises(ValueError, match="row 0"):
        TokenSequences.from_rows([[1, 2]], [[1]], length=4)


def test_target_mask_drops_segment_starts_and_padding():
    """Packed rows: the first token of each segment has no prediction, so no loss."""
    seqs = TokenSequences(tokens=np.zeros((1, 7), np.int32), positions=np.zeros((1, 7), np.int32),
                          segment_ids=np.array([[1, 1, 1, 2, 2, 0, 0]], np.int32),
                          loss_mask=np.ones((1, 7), np.float32))
    np.testing.assert_array_equal(target_mask(seqs), [[0, 1, 1, 0, 1, 0, 0]])
