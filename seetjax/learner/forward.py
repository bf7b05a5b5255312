"""The model pass every loss reads: token log-probs, entropy and values of token rows."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from seetjax.batch import TokenSequences, target_mask, tree_targets
from seetjax.losses.logprobs import (
    preceding,
    sequence_token_stats,
    shift_right,
    target_token_stats,
)

Array = jax.Array


class Outputs(NamedTuple):
    """Aligned with the tokens ([N, T], f32): entry t is about token t, predicted from t - 1."""

    logprobs: Array
    entropy: Array | None
    mean_logprobs: Array
    values: Array | None  # V of the state before token t (PPO)


def sequence_outputs(graphdef: nnx.GraphDef, states: tuple[nnx.State, ...], seqs: TokenSequences,
                     *, temperature: float = 1.0, chunk: int = 0, entropy: bool = False,
                     values: bool = False) -> Outputs:
    """One forward pass of the model `nnx.merge(graphdef, *states)` over `seqs`: over its packed
    rows when it has a `Packing` (sharing prefixes with a `PrefixTree`), the outputs then gathered
    back into the layout of `seqs`. Rows with a `target_width` get log-probs, entropy and mean
    log-probs at their target tokens only (`target_mask`; 0 elsewhere), every loss reading them
    there alone."""
    return shared_outputs(graphdef, states, seqs, temperature=temperature, chunk=chunk,
                          entropy=entropy, values=values)[0]


def shared_outputs(graphdef: nnx.GraphDef, states: tuple[nnx.State, ...], seqs: TokenSequences,
                   riders: tuple[TokenSequences, ...] = (), *, temperature: float = 1.0,
                   chunk: int = 0, entropy: bool = False, values: bool = False
                   ) -> tuple[Outputs, ...]:
    """`sequence_outputs` of `seqs`, then of each of `riders`, row sets laid in the packed rows
    of `seqs` (their `Packing` has no rows: `packing.pack_batch`'s riders), from the one pass."""
    model = nnx.merge(graphdef, *states)
    rows = seqs if seqs.packing is None else seqs.packing.rows
    tree = None if seqs.packing is None else seqs.packing.tree
    previous = None if tree is None else tree.previous
    hidden, _ = model.hidden_states(rows.tokens, rows.positions, rows.segment_ids,
                                    segment_ends=None if tree is None else tree.ends)
    if rows.target_width:
        targets = target_mask(rows) if tree is None else tree_targets(rows, tree)
        stats = target_token_stats(hidden, rows.tokens, targets > 0, rows.target_width,
                                   model.logits, temperature, chunk, entropy, previous)
    else:
        stats = sequence_token_stats(hidden, rows.tokens, model.logits, temperature, chunk,
                                     entropy, previous)
    value = None
    if values:
        value = (shift_right(model.values(hidden)) if tree is None
                 else preceding(model.values(hidden), previous))
    out = Outputs(stats.logprobs, stats.entropy, stats.mean_logprobs, value)
    if seqs.packing is None:
        return (out,)
    return tuple(jax.tree.map(s.packing.unpack, out) for s in (seqs, *riders))


def masked_sums(logprobs: Array, mask: Array) -> Array:
    """[N]: each row's log-likelihood of its masked tokens."""
    return jnp.sum(logprobs * mask, axis=-1)
