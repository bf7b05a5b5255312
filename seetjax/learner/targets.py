"""Where the LM head runs: only at the positions whose outputs a loss reads.

Every loss, KL term and metric of the learner reads token statistics at target tokens alone
(`target_mask`: the loss mask less segment starts), and in agent data those are few: the policy's
replies, not the system prompt, the user turns or the tool outputs (6-12% of the tokens of BFCL SFT
dialogs; in the main job's rollouts the head runs at 6-10% of the packed rows' positions). The LM
head (hidden -> vocabulary, ~40% of the tiny model's matmul FLOPs at 512-token rows) and the
log-softmax over its logits then run on each row's target positions, gathered into
`target_width` slots per row (`seetjax.losses.logprobs.target_token_stats`).

The width is static under jit, so it is chosen on the host from the batch: the smallest of 1/16,
1/8, 1/4 and 1/2 of the row (rounded up to a multiple of 8) that holds the most target tokens of
any model row (packed rows, when packed), else 0 (the head everywhere). Fractions of the row
rather than of the count: batches of one row width then nearly always get one width, so a run
compiles about as many programs as before (widths following the count compiled a new program
every other RL step of the main job). With several processes they agree on the largest count.
"""

from __future__ import annotations

import numpy as np

from seetjax.batch import PrefixTree, TokenSequences, TrajectoryBatch
from seetjax.learner.packing import agreed_max, model_rows, rides

FRACTIONS = (16, 8, 4, 2)  # the widths tried: row / 16, row / 8, ...


def target_counts(rows: TokenSequences, tree: PrefixTree | None = None) -> np.ndarray:
    """[N] int: each row's target tokens (`seetjax.batch.target_mask`, or `tree_targets` for
    packed rows sharing prefixes; computed on the host)."""
    if tree is not None:
        return np.sum((np.asarray(rows.loss_mask) != 0) & (np.asarray(tree.previous) >= 0),
                      axis=1)
    seg = np.asarray(rows.segment_ids)
    has_prev = np.zeros(seg.shape, bool)
    has_prev[:, 1:] = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0)
    return np.sum((np.asarray(rows.loss_mask) != 0) & has_prev, axis=1)


def target_width(rows: TokenSequences, tree: PrefixTree | None = None) -> int:
    """The smallest row / 16, row / 8, row / 4 or row / 2 (a multiple of 8) that holds every
    row's target tokens, or 0 (the head at every position) when none does."""
    length = rows.tokens.shape[1]
    most = agreed_max(int(target_counts(rows, tree).max(initial=0)))
    for fraction in FRACTIONS:
        width = -(-length // (8 * fraction)) * 8
        if most <= width < length:
            return width
    return 0


def head_share(row_sets: list[TokenSequences]) -> float:
    """The share of the model rows' positions that the LM head ran at (1.0: everywhere)."""
    rows = model_rows(row_sets)
    slots = sum(r.tokens.size for r in rows)
    return sum(r.tokens.shape[0] * (r.target_width or r.tokens.shape[1]) for r in rows) / slots


def _with_width(seqs: TokenSequences) -> TokenSequences:
    if seqs.packing is None:
        return seqs.replace(target_width=target_width(seqs))
    if rides(seqs):  # laid in the trajectories' rows, whose width covers it
        return seqs
    rows = seqs.packing.rows
    return seqs.replace(packing=seqs.packing.replace(
        rows=rows.replace(target_width=target_width(rows, seqs.packing.tree))))


def with_target_widths(batch: TrajectoryBatch) -> TrajectoryBatch:
    """`batch` (host arrays) with a `target_width` on every set of rows the model runs over."""
    if batch.sequences is not None:
        batch = batch.replace(sequences=_with_width(batch.sequences))
    if batch.pairs is not None:
        pairs = batch.pairs
        batch = batch.replace(pairs=pairs.replace(chosen=_with_width(pairs.chosen),
                                                  rejected=_with_width(pairs.rejected)))
    return batch
