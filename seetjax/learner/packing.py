"""Packing the learner's rows: several trajectories to a row for the model pass (`Packing`).

Rollout batches hold one trajectory per row, right-padded to a fixed width, and padding was ~40%
of the learner's token slots. The packer lays the rows' contents into fewer rows of the same
width by first-fit decreasing (items by decreasing length, each into the first row with room;
Johnson 1973: at most 11/9 OPT + 6/9 rows), deterministic: ties go by row index.

Only the model pass moves: the packed rows go through the transformer and the LM head, and the
per-token outputs are gathered back into the one-trajectory-per-row layout, where every per-token
and per-trajectory quantity (rewards, groups, advantages, old log-probs, KL, values, sequence
aggregations, pairs) is computed exactly as without packing. The losses are unchanged; the
tokens' outputs equal the unpacked ones up to float rounding (same-segment causal attention,
positions kept).

Layout: the learner deals rows to `chunks` (mini x micro batches) with a stride, row i to chunk
i % chunks (`RowChunks`), and a chunk's rows to the batch devices in contiguous blocks. Rows are
packed within each (chunk, device block) group into the same number of packed rows per group,
laid out by the same rule, so every chunk (mini-batch, micro-batch) holds exactly the
trajectories it holds unpacked and `Packing.index` counts slots within the chunk. With several
processes, each packs its own rows (rows owned in process order, as `global_batch` places them on
`make_mesh`'s devices) and the processes agree on the largest row count.

Shapes: packed rows per group are the smallest 2^k or 3 * 2^k >= the rows first-fit decreasing
needs (under 1/3 of them spare), capped at the unpacked rows per group: about 2 log2(rows per
group) + 1 shapes, so compilations stay bounded.

Pairs riding with the trajectories (`pack_batch`'s `riders`): a SEET counterfactual pair is a
failed episode's prefix (often most of its tokens) and one step. Laid in the trajectories' packed
rows, in the group of the trajectory it begins like, its prefix is that trajectory's slots and the
model pass computes its step alone; packed apart, it cost a row of its own per pair.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from seetjax.batch import Packing, PrefixTree, TokenSequences, TrajectoryBatch
from seetjax.learner import prefix_tree


def row_lengths(segment_ids: np.ndarray) -> np.ndarray:
    """[N] int: each row's length up to its last real token (0 for a padding row)."""
    real = np.asarray(segment_ids) != 0
    return np.where(real.any(axis=1), real.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bins of item indices: items by decreasing length (ties by index), each into the first bin
    with room for it; items of length 0 go nowhere."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if lengths[i] == 0:
            continue
        b = next((b for b, r in enumerate(room) if lengths[i] <= r), len(bins))
        if b == len(bins):
            bins.append([])
            room.append(capacity)
        bins[b].append(i)
        room[b] -= lengths[i]
    return bins


def bucket_rows(n: int, cap: int) -> int:
    """The smallest 2^k or 3 * 2^k >= max(n, 1), at most `cap`."""
    power = 1 << (max(n, 1) - 1).bit_length()
    return min(power * 3 // 4 if power >= 4 and power * 3 // 4 >= n else power, cap)


def row_groups(rows: int, chunks: int, devices: int) -> np.ndarray:
    """[rows] int: the group chunk * devices + block of each row, row i being in chunk
    i % chunks and, within the chunk's rows, in device block (i // chunks) // (rows per block)."""
    i = np.arange(rows)
    per_block = rows // (chunks * devices)
    return (i % chunks) * devices + (i // chunks) // per_block


def agreed_max(n: int) -> int:
    """n, or its maximum over the processes (every process packs to the same shape)."""
    if jax.process_count() == 1:
        return n
    return int(np.max(multihost_utils.process_allgather(np.int32(n))))


def rides(seqs: TokenSequences) -> bool:
    """Whether `seqs` was laid in the trajectories' packed rows (`with_riders`)."""
    return seqs.packing is not None and seqs.packing.rows is None


def model_rows(row_sets: Sequence[TokenSequences]) -> list[TokenSequences]:
    """The rows the model runs over for each set: its packed rows, or the set itself unpacked;
    none for a set riding in another's packed rows (`with_riders`), whose slots are those."""
    return [s if s.packing is None else s.packing.rows for s in row_sets if not rides(s)]


def _largest_group(of_group: np.ndarray) -> int:
    """The most rows any group holds (the cap on its packed rows)."""
    return int(np.bincount(of_group).max(initial=1))


def host_arrays(seqs: TokenSequences, chunks: int, devices: int) -> tuple[np.ndarray, ...]:
    """The tokens, positions, segment ids and loss masks of `seqs` as numpy arrays, once its
    rows are checked to split into chunks x devices groups."""
    n = np.shape(seqs.tokens)[0]
    if n % (chunks * devices):
        raise ValueError(f"packing: {n} rows do not split into {chunks} chunks x {devices} "
                         "devices")
    return tuple(np.asarray(x) for x in (seqs.tokens, seqs.positions, seqs.segment_ids,
                                         seqs.loss_mask))


def pack_rows(seqs: TokenSequences, chunks: int = 1, devices: int = 1,
              of_group: np.ndarray | None = None) -> TokenSequences:
    """`seqs` (host arrays, [N, T], this process's rows) with a `Packing` of its rows into
    chunks x devices x k rows of width T, k the bucketed largest count any group needs. Row i
    goes to group `of_group[i]` (chunk * devices + device block; default `row_groups`)."""
    tokens, positions, segments, masks = host_arrays(seqs, chunks, devices)
    n, width = tokens.shape
    groups = chunks * devices
    lengths = row_lengths(segments)
    of_group = row_groups(n, chunks, devices) if of_group is None else of_group
    bins = []
    for g in range(groups):
        members = np.flatnonzero(of_group == g)
        bins.append([[int(members[i]) for i in b]
                     for b in first_fit_decreasing(lengths[members].tolist(), width)])
    per_group = agreed_max(bucket_rows(max(len(b) for b in bins), _largest_group(of_group)))
    # chunk-local packed rows of the processes before this one, then this one's
    offset = jax.process_index() * devices * per_group
    packed = [np.zeros((groups * per_group, width), x.dtype)
              for x in (tokens, positions, segments, masks)]
    index = np.full((n, width), jax.process_count() * devices * per_group * width, np.int32)
    for g, group_bins in enumerate(bins):
        chunk, block = divmod(g, devices)
        for k, members in enumerate(group_bins):
            row = (block * per_group + k) * chunks + chunk
            start = shift = 0
            for i in members:
                span = slice(start, start + lengths[i])
                seg = segments[i, :lengths[i]]
                for out, x in zip(packed, (tokens, positions, segments, masks)):
                    out[row, span] = x[i, :lengths[i]]
                packed[2][row, span] = np.where(seg != 0, seg + shift, 0)
                read = np.flatnonzero(seg[1:] != 0) + 1  # t >= 1, real tokens
                index[i, read] = (offset + row // chunks) * width + start + read
                start += lengths[i]
                shift += int(seg.max())
    rows = TokenSequences(tokens=packed[0], positions=packed[1], segment_ids=packed[2],
                          loss_mask=packed[3])
    return seqs.replace(packing=Packing(rows=rows, index=index))


def _single_segment(segment_ids: np.ndarray, length: int) -> bool:
    """Whether a row's `length` leading slots are one segment (the rows a trie may share)."""
    return bool(length) and segment_ids[0] != 0 and bool(np.all(segment_ids[:length]
                                                                 == segment_ids[0]))


def pack_shared_rows(seqs: TokenSequences, chunks: int = 1, devices: int = 1,
                     of_group: np.ndarray | None = None) -> TokenSequences:
    """`pack_rows` with the rows' common leading tokens laid once (`PrefixTree`,
    `seetjax.learner.prefix_tree`): within each (chunk, device block) group, rows that begin
    alike share the slots of their common prefix; the outputs gathered back are every row's own
    (equal to `pack_rows`' up to float rounding). Same groups, bucketing and `index` rules.
    Where no row shares anything (on every process), `pack_rows`' layout, without a tree."""
    tokens, positions, segments, masks = host_arrays(seqs, chunks, devices)
    n, width = tokens.shape
    groups = chunks * devices
    lengths = row_lengths(segments)
    keys = {m: prefix_tree.row_keys(tokens[m, :lengths[m]], positions[m, :lengths[m]])
            for m in range(n) if _single_segment(segments[m], lengths[m])}
    of_group = row_groups(n, chunks, devices) if of_group is None else of_group
    bins = [prefix_tree.plan_bins(keys, {int(m): int(lengths[m])
                                         for m in np.flatnonzero(of_group == g)}, width)
            for g in range(groups)]
    slots = sum(prefix_tree.trie_slots(keys, lengths, b) for group in bins for b in group)
    if not agreed_max(int(slots < lengths.sum())):  # nothing shared: the plain layout
        return pack_rows(seqs, chunks, devices, of_group)
    per_group = agreed_max(bucket_rows(max(len(b) for b in bins), _largest_group(of_group)))
    offset = jax.process_index() * devices * per_group
    shape = (groups * per_group, width)
    out = {name: np.zeros(shape, dtype) for name, dtype in (
        ("tokens", tokens.dtype), ("positions", positions.dtype), ("segment_ids", np.int32),
        ("ends", np.int32), ("loss_mask", masks.dtype))}
    out["previous"] = np.full(shape, -1, np.int32)
    index = np.full((n, width), jax.process_count() * devices * per_group * width, np.int32)
    for g, group_bins in enumerate(bins):
        chunk, block = divmod(g, devices)
        for k, members in enumerate(group_bins):
            row = (block * per_group + k) * chunks + chunk
            _lay_row((tokens, positions, segments, masks), keys, members,
                     {name: x[row] for name, x in out.items()}, index,
                     (offset + row // chunks) * width)
    rows = TokenSequences(**{f: out[f] for f in ("tokens", "positions", "segment_ids",
                                                  "loss_mask")})
    tree = PrefixTree(ends=out["ends"], previous=out["previous"])
    return seqs.replace(packing=Packing(rows=rows, index=index, tree=tree))


def _lay_row(arrays: tuple[np.ndarray, ...], keys: dict[int, np.ndarray], members: list[int],
             out: dict[str, np.ndarray], index: np.ndarray, base: int) -> None:
    """Lays rows `members` of `arrays` (tokens, positions, segment ids, loss masks) in one packed
    row (`out`: its arrays, written in place) as one trie of the rows with keys, each other row
    segment by segment (a trie of rows takes at most their lengths: plain bins fit too), and
    points `index` (flat slots from `base`) at each member's tokens."""
    tokens, positions, segments, masks = arrays
    forests = [prefix_tree.build_forest(keys, [m for m in members if m in keys])]
    for m in members:
        if m not in keys:
            nodes = prefix_tree.segment_nodes(m, segments[m])
            forests.append((nodes, {m: nodes}))
    slot, next_id = 0, 1
    previous = out["previous"]
    for roots, paths in forests:
        placed, slot, next_id = prefix_tree.lay_out(roots, slot, next_id)
        for p in placed:
            dst, cols = slice(p.slot, p.slot + p.node.end - p.node.start), slice(p.node.start,
                                                                                 p.node.end)
            out["tokens"][dst] = tokens[p.node.row, cols]
            out["positions"][dst] = positions[p.node.row, cols]
            out["segment_ids"][dst], out["ends"][dst] = p.id, p.end_id
            previous[dst] = np.arange(dst.start - 1, dst.stop - 1)
            previous[dst.start] = p.previous
        at = {id(p.node): p.slot for p in placed}
        for m, path in paths.items():
            for node in path:
                cols = np.arange(node.start, node.end)
                dst = at[id(node)] + cols - node.start
                read = previous[dst] >= 0
                index[m, cols[read]] = base + dst[read]
                out["loss_mask"][dst[read]] = np.maximum(out["loss_mask"][dst[read]],
                                                         masks[m, cols[read]])


def sharing_order(seqs: TokenSequences, updates: int = 1, micros: int = 1, devices: int = 1
                  ) -> np.ndarray:
    """[N] int: an order of the rows (row i of the result is row order[i]) in which rows that
    begin alike share a (micro-batch, device block) group, so that they can share prefixes:
    the learner deals rows to its updates x micros chunks with a stride (`row_groups`), which
    spreads a GRPO group over every micro-batch. Each row stays in its mini-batch (an update
    sees the rows it saw, and accumulating micro-batches sums the same gradients); within one,
    its rows in lexicographic order of tokens and positions are dealt to the groups in
    contiguous runs, real rows as evenly as they go, padding rows last."""
    segments = np.asarray(seqs.segment_ids)
    n = segments.shape[0]
    chunks = updates * micros
    lengths = row_lengths(segments)
    tokens, positions = np.asarray(seqs.tokens), np.asarray(seqs.positions)
    of_group = row_groups(n, chunks, devices)
    update = np.arange(n) % chunks // micros
    order = np.arange(n)
    for u in range(updates):
        slots = np.flatnonzero(update == u)
        real = sorted((int(m) for m in slots if lengths[m]), key=lambda m: (
            not _single_segment(segments[m], lengths[m]),
            prefix_tree.row_keys(tokens[m, :lengths[m]], positions[m, :lengths[m]]).tolist(), m))
        rest = [int(m) for m in slots if not lengths[m]]
        groups = sorted(set(of_group[slots].tolist()))
        share, extra = divmod(len(real), len(groups))
        for k, g in enumerate(groups):
            take = share + (k < extra)
            mine = slots[of_group[slots] == g]
            rows, real = real[:take], real[take:]
            rows += rest[:len(mine) - len(rows)]
            rest = rest[len(mine) - take:]
            order[mine] = rows
    return order


def regrouped(batch: TrajectoryBatch, updates: int, micros: int, devices: int
              ) -> TrajectoryBatch:
    """`batch` with its rows, and its pairs, in `sharing_order`."""
    def order(seqs: TokenSequences | None) -> np.ndarray | None:
        return None if seqs is None else sharing_order(seqs, updates, micros, devices)

    return reordered(batch, order(batch.sequences),
                     order(None if batch.pairs is None else batch.pairs.chosen))


def reordered(batch: TrajectoryBatch, order: np.ndarray | None,
              pair_order: np.ndarray | None = None) -> TrajectoryBatch:
    """`batch` (host arrays) with its rows in `order` and its pairs in `pair_order` (None:
    as they are)."""
    def take(tree, idx):
        return jax.tree.map(lambda x: np.asarray(x)[idx], tree)

    fields = {}
    if order is not None:
        fields = {f.name: take(getattr(batch, f.name), order)
                  for f in dataclasses.fields(batch)
                  if f.name != "pairs" and getattr(batch, f.name) is not None}
    if pair_order is not None and batch.pairs is not None:
        fields["pairs"] = take(batch.pairs, pair_order)
    return batch.replace(**fields)


def pack_batch(batch: TrajectoryBatch, chunks: int = 1, devices: int = 1,
               share_prefixes: bool = False, riders: Sequence[str] = (),
               micros: int | None = None) -> TrajectoryBatch:
    """`batch` with its trajectories and its pairs' chosen and rejected rows packed
    (`pack_rows`, or with `share_prefixes` `pack_shared_rows`). With `share_prefixes`, the pair
    row sets named in `riders` ("chosen", "rejected") ride in the trajectories' packed rows
    (`with_riders`; `micros`: micro-batches per mini-batch, default `chunks`); the others are
    packed apart."""
    pack = pack_shared_rows if share_prefixes else pack_rows
    seqs, pairs = batch.sequences, batch.pairs
    # pairs ride in rows of the trajectories' width only ([P, Tp] may differ from [B, T])
    if not (share_prefixes and seqs is not None and pairs is not None
            and np.shape(pairs.chosen.tokens)[1] == np.shape(seqs.tokens)[1]):
        riders = ()
    if riders:
        batch = with_riders(batch, riders, chunks, devices, micros or chunks)
        pairs = batch.pairs
    elif seqs is not None:
        batch = batch.replace(sequences=pack(seqs, chunks, devices))
    if pairs is not None:
        batch = batch.replace(pairs=pairs.replace(**{
            name: pack(getattr(pairs, name), chunks, devices)
            for name in ("chosen", "rejected") if name not in riders}))
    return batch


def with_riders(batch: TrajectoryBatch, riders: Sequence[str], chunks: int, devices: int,
                micros: int) -> TrajectoryBatch:
    """`batch` with its trajectories packed sharing prefixes (`pack_shared_rows`) together with
    its pairs' row sets `riders`: the pairs first placed (`pair_placement`), each rider set
    then given a `Packing` without rows of its own (`Packing.rows` None) whose `index` points
    into the trajectories' packed rows."""
    seqs = batch.sequences
    order = pair_placement(seqs, batch.pairs.chosen, chunks, devices, micros)
    pairs = reordered(batch, None, order).pairs
    sets = [seqs] + [getattr(pairs, name) for name in riders]
    for rows in sets:
        host_arrays(rows, chunks, devices)  # each set splits into the groups, not just all
    joint = TokenSequences(**{f: np.concatenate([np.asarray(getattr(x, f)) for x in sets])
                              for f in ("tokens", "positions", "segment_ids", "loss_mask")})
    of_group = np.concatenate([row_groups(len(x.tokens), chunks, devices) for x in sets])
    packing = pack_shared_rows(joint, chunks, devices, of_group).packing
    bounds = np.cumsum([0] + [len(x.tokens) for x in sets])
    index = [packing.index[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    pairs = pairs.replace(**{name: getattr(pairs, name).replace(packing=Packing(rows=None,
                                                                                index=i))
                             for name, i in zip(riders, index[1:])})
    return batch.replace(sequences=seqs.replace(packing=packing.replace(index=index[0])),
                         pairs=pairs)


def pair_placement(seqs: TokenSequences, chosen: TokenSequences, chunks: int, devices: int,
                   micros: int) -> np.ndarray:
    """[P] int: an order of the pairs (row j of the result is pair order[j]) that puts each
    pair in the (chunk, device block) group of the trajectory its chosen row shares the longest
    prefix with, where that group has a pair slot free (pair row j's group is
    `row_groups(P, ...)[j]`), else in the free group of the longest one; each pair stays in its
    mini-batch (chunk // micros), so every update trains the pairs it trained. Pairs in order
    of their longest prefix, ties by index; padding pairs fill the slots left."""
    seq_tokens, seq_segments = np.asarray(seqs.tokens), np.asarray(seqs.segment_ids)
    tokens, segments = np.asarray(chosen.tokens), np.asarray(chosen.segment_ids)
    p, groups = len(tokens), chunks * devices
    seq_group = row_groups(len(seq_tokens), chunks, devices)
    slot_group = row_groups(p, chunks, devices)
    update = np.arange(groups) // devices // micros  # a group is chunk * devices + block
    seq_lengths, lengths = row_lengths(seq_segments), row_lengths(segments)
    shared = np.zeros((p, groups), np.int64)  # longest common prefix with a group's row
    for i in np.flatnonzero(lengths):
        n = lengths[i]
        same = seq_tokens[:, :n] == tokens[i, :n]
        common = np.where(same.all(axis=1), n, np.argmin(same, axis=1))
        np.maximum.at(shared[i], seq_group, np.minimum(common, seq_lengths))
    free = {g: list(np.flatnonzero(slot_group == g)) for g in range(groups)}
    order = np.full(p, -1, np.int64)
    own = update[:, None] == update[None, :]  # own[g, h]: groups g and h in one mini-batch
    for i in sorted(np.flatnonzero(lengths),
                    key=lambda i: (-shared[i][own[slot_group[i]]].max(), i)):
        mine = slot_group[i]  # its group as given: kept on ties
        options = [g for g in range(groups) if free[g] and own[mine, g]]
        g = max(options, key=lambda g: (shared[i, g], g == mine, -g))
        order[free[g].pop(0)] = i
    order[order < 0] = [i for i in range(p) if not lengths[i]]
    return order
