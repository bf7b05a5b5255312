"""Releasing a choice's text as it decodes: what is final goes out as a `TokenEvent`; a stop
string ends the choice there (its text and tokens cut before it); text that may begin a stop
string, or an incomplete UTF-8 character, waits for the next chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

from seetjax.models.tokenizer import Tokenizer
from seetjax.serving.requests import ChoiceState, TokenEvent


def release(choice: ChoiceState, tokenizer: Tokenizer) -> None:
    """Emits the text that is final: the stop token is not text; a stop string ends the
    choice there; text that may be the start of a stop string, or an incomplete UTF-8
    character, waits for the next chunk."""
    params = choice.request.handle.params
    body = choice.tokens[:-1] if choice.finish == "stop" else choice.tokens
    text = tokenizer.decode(body)
    keep = len(choice.tokens)
    cut = _find_stop(text, params.stop, max(0, len(choice.released) - _longest(params.stop)))
    if cut is not None:
        text, choice.finish = text[:cut], "stop"
        keep = _tokens_for(tokenizer, body, cut)
    if choice.finish is None:
        end = len(text) - _held_back(text, params.stop)
        text = text[:max(end, len(choice.released))]
    delta = text[len(choice.released):]
    new = slice(choice.sent_tokens, max(keep, choice.sent_tokens))
    if choice.finish is not None:
        choice.tokens, choice.logprobs = choice.tokens[:keep], choice.logprobs[:keep]
        choice.tops = choice.tops[:keep]
        choice.text = text
    if delta or new.stop > new.start or choice.finish is not None:
        choice.request.handle._emit(TokenEvent(
            choice.index, delta, tuple(choice.tokens[new]), tuple(choice.logprobs[new]),
            tuple(tuple(t) for t in choice.tops[new]), choice.finish))
    choice.released = text
    choice.sent_tokens = max(keep, choice.sent_tokens)


def _tokens_for(tokenizer: Tokenizer, ids: list[int], chars: int) -> int:
    """The fewest leading tokens whose text reaches `chars` characters (binary search)."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(ids[:mid])) >= chars:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _longest(stop: Sequence[str]) -> int:
    return max((len(s) for s in stop), default=0)


def _find_stop(text: str, stop: Sequence[str], start: int) -> int | None:
    """Where the first stop string begins in text[start:], or None."""
    found = [i for s in stop if (i := text.find(s, start)) >= 0]
    return min(found) if found else None


def _held_back(text: str, stop: Sequence[str]) -> int:
    """How many trailing characters must wait: a partial UTF-8 character (decoded as U+FFFD) or
    a suffix that begins a stop string."""
    hold = len(text) - len(text.rstrip("\ufffd"))
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    return hold
