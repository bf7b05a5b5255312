"""Random masking of retrieved text in observations (`retrieval_mask_ratio`), an anti-shortcut
ablation: of the n words of the passages one search returns, exactly floor(r * n) are replaced
by `MASK`, chosen uniformly without replacement by a generator seeded with the episode's
(seed, task id, search number), so a retried or replayed step sees the same mask.

Words are whitespace-separated tokens: the environment knows no tokenizer, and a masked word
stays one word. Tool outputs never carry policy loss anyway (the rollout's loss masks); this only
changes what the policy reads. floor(r * n) is taken on the decimal value of r (r = 0.29, n = 100
masks 29, where the float product 28.999... would floor to 28).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from fractions import Fraction

MASK = "[MASK]"


def masked_count(ratio: float, n: int) -> int:
    """floor(ratio * n), ratio read as the decimal it prints as."""
    return math.floor(Fraction(repr(float(ratio))) * n)


def mask_rng(seed: int, task_id: str, search: int) -> random.Random:
    """The generator of one search's mask (see the module docstring)."""
    return random.Random(f"{seed}:{task_id}:{search}")


def mask_words(texts: Sequence[str], ratio: float, rng: random.Random) -> list[str]:
    """`texts` with exactly floor(ratio * n) of their n words, together, replaced by `MASK`;
    each text comes back as its words joined by single spaces."""
    words = [text.split() for text in texts]
    where = [(i, j) for i, text_words in enumerate(words) for j in range(len(text_words))]
    for i, j in rng.sample(where, masked_count(ratio, len(where))):
        words[i][j] = MASK
    return [" ".join(text_words) for text_words in words]
