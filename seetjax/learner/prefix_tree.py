"""Rows that begin alike, laid once: the prefix forest behind `PrefixTree` packing.

A GRPO group samples its episodes from one prompt, and a branching rollout forks an episode at a
tool-call boundary (`seetjax.rollout.branching`), so the rows of an RL batch share long runs of
leading tokens: the system prompt, the tools and the task for a group; the whole history before
the fork for a branch row. Laid out as a compressed trie of the rows (Morrison 1968, PATRICIA),
each distinct prefix takes its slots once, and the model pass computes it once. Forward and
backward stay exact: a shared slot's hidden state is the one every row holding the prefix would
compute (its attention sees the same tokens at the same positions), and the gradient it receives
is the sum of what each row's copy received unshared. Prefix Grouper (Liu et al. 2025,
arXiv:2506.05433) shares a GRPO group's one prompt this way; a trie shares every common prefix,
at any depth, which is what branch rows need.

Sharing is decided on the host, by first fit in which a row costs a packed row only the tokens it
adds to that row's trie (its length less the longest prefix it shares with a row already there),
over the rows in lexicographic order (rows that share come together) and in decreasing length
(first-fit decreasing packs tighter), whichever takes fewer rows, then fewer slots; plain
first-fit decreasing where it beats both. Only rows of one segment starting at column 0 share; a
row of several segments (packed SFT dialogs) is laid segment by segment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


def row_keys(tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[n] int64: token and position in one comparable integer (rows share only when both
    agree: the same token at another position has another hidden state)."""
    return (tokens.astype(np.int64) << 32) | (positions.astype(np.int64) & 0xFFFFFFFF)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the longest common prefix of two 1-D arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def first_fit_shared(keys: dict[int, np.ndarray], lengths: dict[int, int], capacity: int,
                     order: Sequence[int]) -> list[list[int]]:
    """First fit over rows in `order`, where a row costs a bin only its tokens past the longest
    prefix it shares with a row already there (the slots it adds to the bin's trie). Rows
    without a key (several segments) share nothing; rows of length 0 go nowhere."""
    bins: list[list[int]] = []
    room: list[int] = []
    for m in order:
        if not lengths[m]:
            continue
        for b, members in enumerate(bins):
            shared = max((common_prefix(keys[m], keys[o]) for o in members if o in keys),
                         default=0) if m in keys else 0
            if lengths[m] - shared <= room[b]:
                members.append(m)
                room[b] -= lengths[m] - shared
                break
        else:
            bins.append([m])
            room.append(capacity - lengths[m])
    return bins


def trie_slots(keys: dict[int, np.ndarray], lengths: dict[int, int], members: Sequence[int]
               ) -> int:
    """The slots `members` take laid together: their trie's (the sum of each sorted key's length
    less its common prefix with the one before), plus the rows without a key whole."""
    keyed = sorted((m for m in members if m in keys), key=lambda m: (keys[m].tolist(), m))
    shared = sum(common_prefix(keys[a], keys[b]) for a, b in zip(keyed, keyed[1:]))
    return sum(lengths[m] for m in members) - shared


def plan_bins(keys: dict[int, np.ndarray], lengths: dict[int, int], capacity: int
              ) -> list[list[int]]:
    """Rows into packed rows of `capacity` slots: the fewest rows, then the fewest slots, of
    first fit with shared prefixes over the rows in lexicographic order (rows that share sit
    together) and in decreasing length (first-fit decreasing), and of plain first-fit
    decreasing. Deterministic: ties by row index, then in that order."""
    rows = list(lengths)
    decreasing = sorted(rows, key=lambda m: (-lengths[m], m))
    lexicographic = sorted(rows, key=lambda m: (m not in keys, keys[m].tolist() if m in keys
                                                else [], m))
    candidates = [first_fit_shared(keys, lengths, capacity, lexicographic),
                  first_fit_shared(keys, lengths, capacity, decreasing),
                  first_fit_shared({}, lengths, capacity, decreasing)]
    return min(candidates, key=lambda bins: (len(bins), sum(trie_slots(keys, lengths, b)
                                                            for b in bins)))


@dataclasses.dataclass
class Node:
    """A span [start, end) of the tokens of row `row`, shared by every row whose path holds it."""

    row: int
    start: int
    end: int
    children: list[Node] = dataclasses.field(default_factory=list)


def segment_nodes(row: int, segment_ids: np.ndarray) -> list[Node]:
    """A row that shares nothing as one root per segment (runs of equal non-zero ids)."""
    ids = np.asarray(segment_ids)
    starts = np.flatnonzero(np.diff(ids, prepend=0) != 0)
    ends = np.append(starts[1:], len(ids))
    return [Node(row, int(a), int(b)) for a, b in zip(starts, ends) if ids[a] != 0]


def _split(keys: dict[int, np.ndarray], members: list[int], depth: int) -> list[list[int]]:
    """Sorted `members` (all longer than `depth`) in runs of equal key at `depth`."""
    runs: list[list[int]] = []
    for m in members:
        if runs and keys[runs[-1][0]][depth] == keys[m][depth]:
            runs[-1].append(m)
        else:
            runs.append([m])
    return runs


def build_forest(keys: dict[int, np.ndarray], members: Sequence[int]
                 ) -> tuple[list[Node], dict[int, list[Node]]]:
    """The compressed trie of `members`' keys: its roots in the keys' lexicographic order
    (ties by index), and each member's path (the nodes holding its tokens, root first).
    Iterative: any depth."""
    members = sorted(members, key=lambda m: (keys[m].tolist(), m))
    roots: list[Node] = []
    paths: dict[int, list[Node]] = {m: [] for m in members}
    todo = [(run, 0, roots) for run in reversed(_split(keys, members, 0))]
    while todo:
        run, start, siblings = todo.pop()
        end = start + common_prefix(keys[run[0]][start:], keys[run[-1]][start:])
        node = Node(run[0], start, end)
        siblings.append(node)
        for m in run:
            paths[m].append(node)
        longer = [m for m in run if len(keys[m]) > end]
        todo.extend((r, end, node.children) for r in reversed(_split(keys, longer, end)))
    return roots, paths


@dataclasses.dataclass
class Placed:
    """A node laid in a packed row: its first slot, its id (depth-first preorder), one past the
    largest id in its subtree, and the slot its first token is predicted from (-1: a root)."""

    node: Node
    slot: int
    id: int
    end_id: int
    previous: int


def lay_out(roots: Sequence[Node], slot: int, first_id: int) -> tuple[list[Placed], int, int]:
    """`roots` laid from `slot` in depth-first preorder, each node's tokens contiguous and after
    its ancestors': the nodes placed in that order, the next free slot and the next free id."""
    placed: list[Placed] = []
    todo = [(node, -1) for node in reversed(roots)]
    next_id = first_id
    while todo:
        node, previous = todo.pop()
        placed.append(Placed(node, slot, next_id, 0, previous))
        slot += node.end - node.start
        next_id += 1
        todo.extend((child, slot - 1) for child in reversed(node.children))
    end_ids: dict[int, int] = {}
    for p in reversed(placed):  # a node's last child holds its subtree's largest ids
        p.end_id = end_ids[id(p.node.children[-1])] if p.node.children else p.id + 1
        end_ids[id(p.node)] = p.end_id
    return placed, slot, next_id
