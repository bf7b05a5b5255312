"""InfoNCE with in-batch and hard negatives (van den Oord et al. 2018; Karpukhin et al. 2020).

For query i with positive document i among N documents (the B positives of the batch first, then
the mined hard negatives) and similarities s_ij = <q_i, d_j>:

    L_q->d = mean_i [ -s_ii / tau + logsumexp_{j allowed for i} s_ij / tau ]

A document that is also relevant to query i (another gold tool of the same query, or a shared one)
is not a negative: `false_negatives[i, j]` drops it from row i's denominator. With `symmetric`,
the document -> query direction over the B positives is averaged in (Radford et al. 2021):

    L_d->q = mean_j [ -s_jj / tau + logsumexp_{i allowed for j} s_ij / tau ],  L = (L_q->d + L_d->q) / 2
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def info_nce(queries: Array, docs: Array, false_negatives: Array, temperature: float,
             symmetric: bool = False) -> tuple[Array, dict[str, Array]]:
    """queries [B, D], docs [N >= B, D] (docs[i] is query i's positive), false_negatives [B, N]
    bool (never set on the diagonal) -> (loss, metrics: loss, accuracy of the q->d argmax)."""
    b = queries.shape[0]
    logits = queries @ docs.T / temperature
    logits = jnp.where(false_negatives, -jnp.inf, logits)
    positive = jnp.diagonal(logits)
    loss = jnp.mean(jax.nn.logsumexp(logits, axis=1) - positive)
    if symmetric:
        square = logits[:, :b]  # the documents that are some query's positive
        loss = (loss + jnp.mean(jax.nn.logsumexp(square, axis=0) - positive)) / 2
    accuracy = jnp.mean(jnp.argmax(logits, axis=1) == jnp.arange(b))
    return loss, {"loss": loss, "accuracy": accuracy}
