"""Rollout results -> `TrajectoryBatch`, the arrays the learner consumes.

Static shapes keep the learner's step compiled once: rows are padded to a multiple of the
learner's batch divisor (padding rows have segment id 0 and count nowhere), every row to one
`length` (a training run passes its fixed row length; by default the next power of two), and
counterfactual pairs to a fixed `max_pairs` (padding pairs weigh 0), so a step with no record
compiles the same program as one with many. Branching rollouts (`seetjax.rollout.branching`) add
a varying number of branch rows: `rows_per_episode` reserves each original episode its bound
(`BranchConfig.rows_per_episode`), the rows its branches did not take being padding too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seetjax.batch import PreferencePairs, TokenSequences, TrajectoryBatch
from seetjax.errors import invalid
from seetjax.rollout.result import RolloutResult
from seetjax.sampling.sampler import bucket
from seetjax.seet.records import CounterfactualRecord


def round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def trajectory_batch(result: RolloutResult, *, pad_id: int, row_multiple: int = 1,
                     length: int | None = None, max_pairs: int | None = None,
                     pair_seed: int | Sequence[int] | None = None,
                     rows_per_episode: int | None = None) -> TrajectoryBatch:
    """Episodes as rows (tokens, loss mask, sampler logprobs, return, token rewards and their
    mask under the rollout's reward kind, group id, each reply's state key as a small integer,
    `Episode.step_keys`, where each user turn after the first begins, `Episode.turn_starts`, the
    policy version of each sampled token) and, when
    `max_pairs` is set, up to that many counterfactual records as preference pairs (anchor step
    chosen, failed step rejected), drawn uniformly from all the records with `pair_seed` (see
    `sample_records`). Rows: one per episode, or with `rows_per_episode`, that many per original
    episode (its branch rows included), rounded up to `row_multiple`; pairs: `max_pairs`, the
    same (padding pairs weigh nothing)."""
    arrays = [e.conversation.training_arrays() for e in result.episodes]
    rows = round_up(batch_rows(result, rows_per_episode), row_multiple)
    length = length or bucket(max((len(t) for t, _, _ in arrays), default=1), 256)
    tokens = [t.tolist() for t, _, _ in arrays] + [[]] * (rows - len(arrays))
    masks = [m.tolist() for _, m, _ in arrays] + [[]] * (rows - len(arrays))
    sequences = TokenSequences.from_rows(tokens, masks, length, pad_id)
    logprobs = np.zeros((rows, length), np.float32)
    for i, (_, _, lp) in enumerate(arrays):
        logprobs[i, :len(lp)] = lp
    rewards = np.zeros((rows,), np.float32)
    rewards[:len(arrays)] = result.rewards()
    token_rewards = np.zeros((rows, length), np.float32)
    reward_mask = np.zeros((rows, length), np.float32)
    for i, scored in enumerate(result.scored):
        for position, reward in scored:
            token_rewards[i, position] += reward  # two steps of one reply share its last token
            reward_mask[i, position] = 1.0
    groups = np.full((rows,), -1, np.int32)  # padding rows form a group of their own
    groups[:len(arrays)] = result.group_ids()
    step_keys = np.full((rows, length), -1, np.int32)
    ids: dict[str, int] = {}  # equal states, equal ids; GiGPO pairs them with the group ids
    for i, episode in enumerate(result.episodes):
        for start, end, key in episode.step_keys():
            step_keys[i, start:end] = ids.setdefault(key, len(ids))
    turn_starts = np.zeros((rows, length), np.float32)
    for i, episode in enumerate(result.episodes):
        starts = [p for p in episode.turn_starts() if p < len(arrays[i][0])]
        turn_starts[i, starts] = 1.0
    versions = np.full((rows, length), -1, np.int32)
    for i, episode in enumerate(result.episodes):
        row = episode.conversation.training_versions()
        versions[i, :len(row)] = row
    pairs = None
    if max_pairs is not None:
        # padded to the row multiple too: a data axis wider than max_pairs splits them evenly
        pairs = preference_pairs(sample_records(result.records, max_pairs, pair_seed),
                                 round_up(max_pairs, row_multiple), pad_id, length)
    return TrajectoryBatch(sequences=sequences, old_logprobs=logprobs, rewards=rewards,
                           token_rewards=token_rewards, reward_mask=reward_mask, group_ids=groups,
                           step_keys=step_keys, turn_starts=turn_starts, versions=versions,
                           pairs=pairs)


def batch_rows(result: RolloutResult, rows_per_episode: int | None) -> int:
    """A row for each episode of `result` (None), or `rows_per_episode` rows for each original
    one, failing when its branches need more; either way the episodes left out (over the token
    cap, or never started) keep their rows, as padding."""
    branches = sum(e.branch for e in result.episodes)
    originals = len(result.episodes) - branches + result.left_out
    if rows_per_episode is None:
        return originals + branches
    rows = originals * rows_per_episode
    if originals + branches > rows:
        raise invalid("trajectory_batch", "rows_per_episode", rows_per_episode,
                      f"{originals} original episodes and {branches} branch rows do not fit in "
                      f"{rows} rows (BranchConfig.rows_per_episode bounds a rollout's branches)")
    return rows


def sample_records(records: Sequence[CounterfactualRecord], count: int,
                   seed: int | Sequence[int] | None) -> list[CounterfactualRecord]:
    """`count` records drawn uniformly without replacement (all of them when there are no more),
    kept in episode order. The draw is a pure function of `seed` (a run passes its seed and the
    step, so a resumed run trains the same pairs); None: the first `count`, as before."""
    if len(records) <= count or seed is None:
        return list(records[:count])
    picked = np.random.default_rng(seed).choice(len(records), size=count, replace=False)
    return [records[i] for i in sorted(picked.tolist())]


def preference_pairs(records: Sequence[CounterfactualRecord], count: int, pad_id: int,
                     length: int | None = None) -> PreferencePairs:
    """`count` pairs (the records, then padding of weight 0): chosen = prefix + anchor step,
    rejected = prefix + failed step, each masked on its step's tokens only."""
    chosen = [list(r.prefix_ids) + list(r.anchor_ids) for r in records]
    rejected = [list(r.prefix_ids) + list(r.failed_ids) for r in records]
    chosen_masks = [[0.0] * len(r.prefix_ids) + [1.0] * len(r.anchor_ids) for r in records]
    rejected_masks = [[0.0] * len(r.prefix_ids) + [1.0] * len(r.failed_ids) for r in records]
    pad = count - len(records)
    length = length or bucket(max((len(s) for s in chosen + rejected), default=1), 256)
    weights = np.zeros((count,), np.float32)
    weights[:len(records)] = 1.0
    return PreferencePairs(
        chosen=TokenSequences.from_rows(chosen + [[]] * pad, chosen_masks + [[]] * pad, length,
                                        pad_id),
        rejected=TokenSequences.from_rows(rejected + [[]] * pad, rejected_masks + [[]] * pad,
                                          length, pad_id),
        weights=weights)
