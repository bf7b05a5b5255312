"""DPO pairs from rollouts: in each task's group, the best episode over the worst one.

Episodes of a group share their prompt; when their rewards differ, the highest-rewarded episode's
training sequence is `chosen` and the lowest's `rejected`, each masked on its own policy tokens
(Rafailov et al. 2023 on whole trajectories). Groups whose rewards are all equal give no pair.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from seetjax.batch import PreferencePairs, TokenSequences, TrajectoryBatch
from seetjax.rollout.result import RolloutResult
from seetjax.sampling.sampler import bucket


def best_worst_pairs(result: RolloutResult) -> list[tuple[int, int]]:
    """(chosen, rejected) episode indices, one pair per group whose rewards differ."""
    rewards = result.rewards()
    groups: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(result.group_ids()):
        groups[int(g)].append(i)
    pairs = []
    for members in groups.values():
        best = max(members, key=lambda i: (rewards[i], -i))
        worst = min(members, key=lambda i: (rewards[i], i))
        if rewards[best] > rewards[worst]:
            pairs.append((best, worst))
    return pairs


def rollout_preferences(result: RolloutResult, pad_id: int, row_multiple: int = 1,
                        length: int | None = None) -> TrajectoryBatch:
    """A batch of DPO pairs only, padded to a multiple of `row_multiple` pairs (padding pairs
    weigh 0; with no pair at all the batch is all padding and the update changes nothing)."""
    arrays = [e.conversation.training_arrays() for e in result.episodes]
    pairs = best_worst_pairs(result)
    count = max(row_multiple, -(-len(pairs) // row_multiple) * row_multiple)
    length = length or bucket(max((len(arrays[i][0]) for pair in pairs for i in pair),
                                  default=1), 256)

    def rows(side: int) -> TokenSequences:
        picked = [arrays[pair[side]] for pair in pairs]
        empty = count - len(picked)
        return TokenSequences.from_rows([a[0].tolist() for a in picked] + [[]] * empty,
                                        [a[1].tolist() for a in picked] + [[]] * empty, length,
                                        pad_id)

    weights = np.zeros((count,), np.float32)
    weights[:len(pairs)] = 1.0
    return TrajectoryBatch(pairs=PreferencePairs(chosen=rows(0), rejected=rows(1),
                                                 weights=weights))
