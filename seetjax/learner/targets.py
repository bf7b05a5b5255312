"""Where the LM head runs: only at the positions whose outputs a loss reads.

Every loss, KL term and metric of the learner reads token statistics at target tokens alone
(`target_mask`: the loss mask less segment starts), and in agent data those are few: the policy's
replies, not the system prompt, the user turns or the tool outputs (about a fifth of an episode's
tokens in the main job's rollouts). The LM head (hidden -> vocabulary, 40% of the tiny model's
matmul FLOPs) and the log-softmax over its logits then run on each row's target positions,
gathered into `target_width` slots per row (`seetjax.losses.logprobs.target_token_stats`).

The width is static under jit, so it is chosen on the host from the batch: the most target tokens
of any model row (packed rows, when packed), bucketed to 2^k or 3 * 2^k (at least 16) so that a
few widths compile; a width that would not save a quarter of the row is 0 (the head everywhere).
With several processes they agree on the largest.
"""

from __future__ import annotations

import numpy as np

from seetjax.batch import TokenSequences, TrajectoryBatch
from seetjax.learner.packing import agreed_max, bucket_rows

MIN_WIDTH = 16


def target_counts(rows: TokenSequences) -> np.ndarray:
    """[N] int: each row's target tokens (`seetjax.batch.target_mask`, computed on the host)."""
    seg = np.asarray(rows.segment_ids)
    has_prev = np.zeros(seg.shape, bool)
    has_prev[:, 1:] = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0)
    return np.sum((np.asarray(rows.loss_mask) != 0) & has_prev, axis=1)


def target_width(rows: TokenSequences) -> int:
    """The bucketed largest row count of target tokens, or 0 where gathering saves too little."""
    length = rows.tokens.shape[1]
    most = agreed_max(int(target_counts(rows).max(initial=0)))
    width = bucket_rows(max(most, MIN_WIDTH), length)
    return 0 if 4 * width > 3 * length else width


def _with_width(seqs: TokenSequences) -> TokenSequences:
    if seqs.packing is None:
        return seqs.replace(target_width=target_width(seqs))
    rows = seqs.packing.rows
    return seqs.replace(packing=seqs.packing.replace(
        rows=rows.replace(target_width=target_width(rows))))


def with_target_widths(batch: TrajectoryBatch) -> TrajectoryBatch:
    """`batch` (host arrays) with a `target_width` on every set of rows the model runs over."""
    if batch.sequences is not None:
        batch = batch.replace(sequences=_with_width(batch.sequences))
    if batch.pairs is not None:
        pairs = batch.pairs
        batch = batch.replace(pairs=pairs.replace(chosen=_with_width(pairs.chosen),
                                                  rejected=_with_width(pairs.rejected)))
    return batch
