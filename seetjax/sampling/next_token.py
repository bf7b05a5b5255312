"""Choosing the next token from logits: greedy, temperature, top-k, nucleus (top-p)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """temperature 0 is greedy; top_k 0 and top_p 1 disable those filters.

    Static under jit: each distinct value compiles once (a run typically has two: sampling for
    rollouts, greedy for evaluation).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def sample_next_token(logits: jax.Array, rng: jax.Array,
                      params: SamplingParams) -> tuple[jax.Array, jax.Array]:
    """Draws one token per row of `logits` [B, V].

    Returns (tokens [B], logprobs [B]). The token is drawn from softmax(logits / temperature)
    restricted to the top-k / top-p set and renormalised (the argmax when greedy). The logprob is
    always under the untruncated softmax(logits / temperature) (softmax(logits) when greedy):
    the quantity a learner recomputes from the same logits and temperature, but, with top_k > 0
    or top_p < 1, not the log-probability of the distribution actually sampled from (which is
    higher by -log of the kept mass). Importance ratios built on it are then biased, so training
    configs with a policy-gradient loss refuse top-k/top-p (`seetjax.train_config`); evaluation
    and plain generation may use them.
    """
    logits = logits.astype(jnp.float32)
    if params.greedy:
        tokens = jnp.argmax(logits, axis=-1)
        logprobs = jax.nn.log_softmax(logits, axis=-1)
    else:
        scaled = logits / params.temperature
        logprobs = jax.nn.log_softmax(scaled, axis=-1)
        tokens = jax.random.categorical(rng, _truncate(scaled, params.top_k, params.top_p), axis=-1)
    chosen = jnp.take_along_axis(logprobs, tokens[:, None], axis=-1)[:, 0]
    return tokens.astype(jnp.int32), chosen


def _truncate(logits: jax.Array, top_k: int, top_p: float) -> jax.Array:
    """Sets logits outside the top-k and outside the nucleus of mass top_p (Holtzman et al. 2020)
    to -inf. The most likely token always survives."""
    neg_inf = jnp.finfo(logits.dtype).min
    if top_k:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, neg_inf, logits)
    if top_p < 1.0:
        sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(sorted_logits, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        kept = mass_before < top_p
        threshold = jnp.min(jnp.where(kept, sorted_logits, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < threshold, neg_inf, logits)
    return logits
