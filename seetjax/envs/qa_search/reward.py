"""The QA search reward: correctness + format - search cost, each part kept for logging.

Correctness is exact match and token F1 against the answer and its aliases (the best alias),
after SQuAD's normalisation (Rajpurkar et al. 2016): lower case, punctuation removed, the articles
a/an/the removed, whitespace collapsed. Token F1 = 2PR / (P + R), P = |common| / |prediction
tokens|, R = |common| / |answer tokens|, common counted as a multiset; when either side has no
tokens, F1 is 1 if both have none, else 0.

    total = em_weight * EM + f1_weight * F1 + format_weight * format
            - search_cost * searches - timeout_penalty * [timed out]

`format` is 1 when the episode ended with an `answer(...)` call and no reply failed to parse.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import string
from collections.abc import Sequence

from seetjax.errors import invalid

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation (see the module docstring)."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when `prediction` equals some answer after normalisation, else 0.0."""
    normalized = normalize_answer(prediction)
    return float(any(normalized == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """The best token F1 of `prediction` against any of `answers`."""
    predicted = normalize_answer(prediction).split()
    return max((_f1(predicted, normalize_answer(a).split()) for a in answers), default=0.0)


def _f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)
    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@dataclasses.dataclass(frozen=True)
class RewardWeights:
    """The weights of the formula in the module docstring; errors name the field."""

    em_weight: float = 1.0
    f1_weight: float = 0.0
    format_weight: float = 0.1
    search_cost: float = 0.0
    timeout_penalty: float = 0.5

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise invalid("QASearchConfig", field.name, value, "must be a number >= 0")


@dataclasses.dataclass(frozen=True)
class RewardParts:
    """Each term of one episode's reward, and the total."""

    exact_match: float
    f1: float
    format: float
    searches: int
    search_penalty: float
    timeout_penalty: float
    total: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


def qa_reward(answer: str | None, answers: Sequence[str], searches: int, format_ok: bool,
              timeout: bool, weights: RewardWeights) -> RewardParts:
    """The reward of an episode that answered `answer` (None: it gave none) after `searches`
    searches (see the module docstring)."""
    em = exact_match(answer, answers) if answer is not None else 0.0
    f1 = token_f1(answer, answers) if answer is not None else 0.0
    form = 1.0 if format_ok else 0.0
    search_penalty = weights.search_cost * searches
    timeout_penalty = weights.timeout_penalty if timeout else 0.0
    total = (weights.em_weight * em + weights.f1_weight * f1 + weights.format_weight * form
             - search_penalty - timeout_penalty)
    return RewardParts(em, f1, form, searches, search_penalty, timeout_penalty, total)
