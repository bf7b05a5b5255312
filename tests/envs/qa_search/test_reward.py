"""Exact match, token F1 and the reward formula against hand-computed values."""

import pytest

from seetjax.envs.qa_search.reward import (
    RewardWeights,
    exact_match,
    normalize_answer,
    qa_reward,
    token_f1,
)


def test_normalisation_is_squads():
    assert normalize_answer("  The Eiffel-Tower,  in PARIS! ") == "eiffeltower in paris"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("Theatre") == "theatre"  # only whole-word articles go


@pytest.mark.parametrize("prediction, answers, em, f1", [
    ("Paris", ["paris"], 1.0, 1.0),
    ("the Paris.", ["Paris"], 1.0, 1.0),
    ("Paris, France", ["Paris"], 0.0, 2 / 3),  # P = 1/2, R = 1: 2 * 1/2 / (3/2)
    ("Warren Buffet", ["Warren Buffett", "Warren Edward Buffett"], 0.0, 0.5),
    ("Edward Buffett", ["Warren Buffett", "Warren Edward Buffett"], 0.0, 0.8),  # P 1, R 2/3
    ("7", ["7", "seven"], 1.0, 1.0),
    ("seven games", ["7", "seven"], 0.0, 2 / 3),
    ("a a b", ["b b"], 0.0, 2 / 3),  # "a" is an article: [b] vs [b, b], P 1, R 1/2
    ("the", ["an"], 1.0, 1.0),  # both empty after normalisation
    ("the", ["Paris"], 0.0, 0.0),
])
def test_exact_match_and_f1(prediction, answers, em, f1):
    assert exact_match(prediction, answers) == em
    assert token_f1(prediction, answers) == pytest.approx(f1)


def test_reward_parts_and_total():
    weights = RewardWeights(em_weight=1.0, f1_weight=0.5, format_weight=0.2, search_cost=0.1,
                            timeout_penalty=0.5)
    parts = qa_reward("Paris, France", ["Paris"], searches=3, format_ok=True, timeout=False,
                      weights=weights)
    assert (parts.exact_match, parts.format, parts.searches) == (0.0, 1.0, 3)
    assert parts.f1 == pytest.approx(2 / 3)
    assert parts.search_penalty == pytest.approx(0.3)
    assert parts.total == pytest.approx(0.5 * 2 / 3 + 0.2 - 0.3)
    timed_out = qa_reward(None, ["Paris"], searches=4, format_ok=False, timeout=True,
                          weights=weights)
    assert timed_out.as_dict() == pytest.approx({
        "exact_match": 0.0, "f1": 0.0, "format": 0.0, "searches": 4.0, "search_penalty": 0.4,
        "timeout_penalty": 0.5, "total": -0.9})


def test_weights_are_validated_by_name():
    with pytest.raises(ValueError, match="search_cost=-0.1"):
        RewardWeights(search_cost=-0.1)
    with pytest.raises(ValueError, match="em_weight='1'"):
        RewardWeights(em_weight="1")
