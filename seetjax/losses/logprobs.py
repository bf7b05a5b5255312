"""Per-token log-probabilities and entropy from logits, logsumexp-based.

log p(y) = z_y - logsumexp(z) with z = logits / temperature: the full-vocabulary log-softmax is
never stored, only one logsumexp per token (plus one softmax pass when the entropy is wanted).
`chunked_token_stats` goes further and never holds more than one chunk of logits: the LM head runs
chunk by chunk over the sequence, rematerialised in the backward pass. `target_token_stats` runs
the LM head only where a loss reads its output (the target tokens), the rest of a row untouched.

The quantity is exactly the one `seetjax.sampling.sample_next_token` reports for a sampled token
(log-softmax of logits / temperature, before top-k/top-p truncation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class TokenStats(NamedTuple):
    """Per position: log p(target), entropy H(p) and the vocabulary mean of log p (for label
    smoothing). All f32, shaped like `targets`; `entropy` is None when not requested."""

    logprobs: Array
    entropy: Array | None
    mean_logprobs: Array


def token_stats(logits: Array, targets: Array, temperature: float = 1.0,
                with_entropy: bool = True) -> TokenStats:
    """Stats of `targets` [...] under softmax(logits / temperature), logits [..., V]."""
    z = logits.astype(jnp.float32)
    if temperature != 1.0:
        z = z / temperature
    lse = jax.nn.logsumexp(z, axis=-1)
    picked = jnp.take_along_axis(z, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    entropy = None
    if with_entropy:
        # H = lse - sum_v p_v z_v; p is formed once, inside the reduction.
        entropy = lse - jnp.sum(jnp.exp(z - lse[..., None]) * z, axis=-1)
    return TokenStats(picked - lse, entropy, jnp.mean(z, axis=-1) - lse)


def chunked_token_stats(hidden: Array, targets: Array, head: Callable[[Array], Array],
                        temperature: float = 1.0, chunk: int = 0,
                        with_entropy: bool = True) -> TokenStats:
    """`token_stats(head(hidden), targets)` computed `chunk` positions at a time along axis 1.

    hidden [B, T, H], targets [B, T]. With chunk > 0 only [B, chunk, V] logits exist at once, in
    the forward pass and (through rematerialisation) in the backward pass; chunk 0 = one piece.
    """
    if chunk <= 0 or chunk >= hidden.shape[1]:
        return token_stats(head(hidden), targets, temperature, with_entropy)
    b, t = targets.shape
    pad = -t % chunk
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    n = (t + pad) // chunk
    # [n, B, chunk, ...]: lax.map runs the pieces in sequence
    hidden = hidden.reshape(b, n, chunk, -1).swapaxes(0, 1)
    targets = targets.reshape(b, n, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def piece(args: tuple[Array, Array]) -> TokenStats:
        h, y = args
        return token_stats(head(h), y, temperature, with_entropy)

    stats = jax.lax.map(piece, (hidden, targets))
    return jax.tree.map(lambda x: x.swapaxes(0, 1).reshape(b, n * chunk)[:, :t], stats)


def shift_right(values: Array) -> Array:
    """[N, T] stats of positions 0..T-1 predicting tokens 1..T  ->  aligned with the predicted
    token (entry t belongs to token t; entry 0 is 0)."""
    return jnp.concatenate([jnp.zeros_like(values[:, :1]), values[:, :-1]], axis=1)


def preceding(values: Array, previous: Array) -> Array:
    """values [N, T, ...] of the slots each slot's token is predicted from: out[n, t] =
    values[n, previous[n, t]], 0 where previous is -1 (a packed row sharing its prefixes,
    `seetjax.batch.PrefixTree`; `shift_right` is the case previous[t] = t - 1)."""
    index = jnp.maximum(previous, 0).reshape(*previous.shape, *(1,) * (values.ndim - 2))
    picked = jnp.take_along_axis(values, index, axis=1)
    return jnp.where((previous >= 0).reshape(index.shape), picked, 0)


def sequence_token_stats(hidden: Array, tokens: Array, head: Callable[[Array], Array],
                         temperature: float = 1.0, chunk: int = 0,
                         with_entropy: bool = True, previous: Array | None = None) -> TokenStats:
    """Stats of every token of `tokens` [N, T] given the hidden states [N, T, H] of the same rows,
    aligned with `tokens` (entry t: token t predicted from position t - 1, or from `previous[t]`
    when given; entry 0, or where previous is -1, is 0)."""
    if previous is not None:
        stats = chunked_token_stats(preceding(hidden, previous), tokens, head, temperature,
                                    chunk, with_entropy)
        return jax.tree.map(lambda s: jnp.where(previous >= 0, s, 0), stats)
    next_tokens = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
    stats = chunked_token_stats(hidden, next_tokens, head, temperature, chunk, with_entropy)
    return jax.tree.map(shift_right, stats)


def target_token_stats(hidden: Array, tokens: Array, targets: Array, width: int,
                       head: Callable[[Array], Array], temperature: float = 1.0, chunk: int = 0,
                       with_entropy: bool = True, previous: Array | None = None) -> TokenStats:
    """`sequence_token_stats` at the tokens `targets` [N, T] (bool) marks, 0 elsewhere, with the
    LM head run at `width` positions per row instead of T: the hidden states that predict the
    marked tokens are gathered (row by row, in order), scored, and the stats scattered back.

    Every row must mark at most `width` tokens (more would be dropped); a marked token t >= 1 is
    predicted from position t - 1, or from `previous[t]` when given. The head's FLOPs and the
    logits' memory shrink by width / T.
    """
    n, t = tokens.shape
    # Filler entries point past the row: their reads are clamped and their writes dropped.
    index = jax.vmap(lambda m: jnp.nonzero(m, size=width, fill_value=t)[0])(targets)
    inside = jnp.minimum(index, t - 1)
    source = (inside - 1 if previous is None
              else jnp.take_along_axis(previous, inside, axis=1))
    index = jnp.where(source >= 0, index, t)  # a token predicted from nothing: never scored
    gathered = jnp.take_along_axis(hidden, jnp.maximum(source, 0)[..., None], axis=1)
    marked = jnp.take_along_axis(tokens, inside, axis=1)
    stats = chunked_token_stats(gathered, marked, head, temperature, chunk, with_entropy)
    rows = jnp.arange(n)[:, None]
    return jax.tree.map(
        lambda s: jnp.zeros((n, t), s.dtype).at[rows, index].set(s, mode="drop"), stats)
