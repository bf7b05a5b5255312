"""Jitted batched generation with a KV cache; multi-turn prefix extension; logprobs out.

Imports `models` and `runtime`.
"""

from seetjax.sampling.next_token import SamplingParams, sample_next_token
from seetjax.sampling.sampler import Completion, DecodeState, Sampler, SequenceBatch

__all__ = ["Completion", "DecodeState", "Sampler", "SamplingParams", "SequenceBatch",
           "sample_next_token"]
