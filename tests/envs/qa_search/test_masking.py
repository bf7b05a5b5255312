"""retrieval_mask_ratio: exactly floor(r * n) words masked, seeded."""

import math

import pytest

from seetjax.envs.qa_search.masking import MASK, mask_rng, mask_words, masked_count

TEXTS = [" ".join(f"w{i}_{j}" for j in range(n)) for i, n in enumerate((7, 13, 1, 0, 29))]


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.29, 0.5, 0.99])
def test_exact_count_and_words_kept_in_place(ratio):
    n = sum(len(t.split()) for t in TEXTS)  # 50
    out = mask_words(TEXTS, ratio, mask_rng(0, "task", 1))
    assert sum(w == MASK for t in out for w in t.split()) == masked_count(ratio, n)
    assert masked_count(ratio, n) == math.floor(round(ratio * 100) * n / 100)
    for before, after in zip(TEXTS, out):
        assert len(before.split()) == len(after.split())
        assert all(a in (b, MASK) for b, a in zip(before.split(), after.split()))


def test_floor_is_taken_on_the_decimal_ratio():
    assert 0.29 * 100 < 29 and masked_count(0.29, 100) == 29
    assert masked_count(0.5, 7) == 3 and masked_count(0.0, 10) == 0


def test_seeded_per_episode_and_search():
    first = mask_words(TEXTS, 0.3, mask_rng(0, "task", 1))
    assert mask_words(TEXTS, 0.3, mask_rng(0, "task", 1)) == first
    assert mask_words(TEXTS, 0.3, mask_rng(0, "task", 2)) != first
    assert mask_words(TEXTS, 0.3, mask_rng(1, "task", 1)) != first
    assert mask_words(TEXTS, 0.3, mask_rng(0, "other", 1)) != first
