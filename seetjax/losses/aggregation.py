"""Reducing a [N, T] matrix of per-token losses to a scalar, with global denominators.

Every mode is  sum over rows of a per-row contribution, divided by a denominator that depends only
on masks: `token-mean` (DAPO, Yu et al. 2025: all tokens of the batch weigh equally),
`seq-mean-token-mean` (GRPO, Shao et al. 2024: each sequence's token mean, then the mean over
sequences), `seq-mean-token-sum` (each sequence's token sum, mean over sequences) and
`seq-mean-token-sum-norm` (Dr. GRPO, Liu et al. 2025: token sums divided by a fixed constant such
as the generation budget, never by the padded width, then the mean over sequences).

The denominators are passed in, so a loss evaluated on one micro-batch with the denominators of
the whole (mini-)batch is that micro-batch's exact share of the whole batch's loss: summing the
micro-batch losses (and gradients) gives the global weighted mean, not a mean of means.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from seetjax.errors import invalid

Array = jax.Array

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                "seq-mean-token-sum-norm")


@struct.dataclass
class Denominators:
    """Totals over the whole batch the loss is normalised over: masked tokens and sequences
    (rows with at least one masked token). Scalars, f32."""

    tokens: Array
    sequences: Array

    @classmethod
    def of(cls, mask: Array) -> Denominators:
        """The totals of `mask` [..., N, T] (summed over all leading axes)."""
        mask = mask.astype(jnp.float32)
        return cls(tokens=jnp.sum(mask), sequences=jnp.sum(jnp.any(mask > 0, axis=-1)))


def aggregate(values: Array, mask: Array, mode: str, denominators: Denominators | None = None,
              norm_constant: float = 1.0) -> Array:
    """Scalar loss from per-token `values` [N, T] under `mask` [N, T] (weights allowed).

    `denominators` default to those of `mask` itself; pass the whole batch's to get a share.
    """
    mask = mask.astype(jnp.float32)
    d = Denominators.of(mask) if denominators is None else denominators
    token_sums = jnp.sum(values * mask, axis=-1)
    if mode == "token-mean":
        return jnp.sum(token_sums) / jnp.maximum(d.tokens, 1.0)
    if mode == "seq-mean-token-mean":
        per_seq = token_sums / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)
        return jnp.sum(per_seq) / jnp.maximum(d.sequences, 1.0)
    if mode == "seq-mean-token-sum":
        return jnp.sum(token_sums) / jnp.maximum(d.sequences, 1.0)
    if mode == "seq-mean-token-sum-norm":
        return jnp.sum(token_sums) / (jnp.maximum(d.sequences, 1.0) * norm_constant)
    raise invalid("aggregate", "mode", mode, f"one of {AGGREGATIONS}")


def masked_mean(values: Array, mask: Array, denominators: Denominators | None = None) -> Array:
    """Token mean of `values` under `mask` (a metric's share when global denominators are given)."""
    return aggregate(values, mask, "token-mean", denominators)
