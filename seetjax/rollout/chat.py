"""Token-in/token-out conversations: an episode as the exact token segments the policy saw.

The opening prompt is rendered once with the chat template; every reply is kept as the sampled ids
(with their sampler logprobs); everything the environment says next (tool results, hints, the next
user turn) is encoded once as the template's continuation and appended. Nothing is ever decoded
and re-tokenised, so the training sequence is exactly the sequence the sampler conditioned on.
A reply cut off at its token limit is closed with the template's stop token (not trained on), and
that token is handed to the sampler ahead of the next observation, so every later reply is sampled
in exactly the context the learner scores it in. Only reply tokens carry loss. A failed attempt
(retried or intercepted by SEET) can be masked (kept in the sequence without loss) or left out of
the training sequence altogether while staying in the generation context (then the sampler's
log-probs of later replies are not the learner's: see `seetjax.rl.config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from seetjax.models.tokenizer import Tokenizer

SegmentKind = Literal["prompt", "reply", "closing", "observation"]


def cap_observation(message: Mapping[str, Any], tokenizer: Tokenizer,
                    max_tokens: int) -> dict[str, Any]:
    """`message` with a tool observation's content cut to its first `max_tokens` tokens and
    marked " ...[truncated]": how rollouts show a long observation, and SFT dialogs with
    `data.max_observation_tokens` (so the warm-up sees what the policy will)."""
    message = dict(message)
    if message.get("role") != "tool":
        return message
    ids = tokenizer.encode(message["content"])
    if len(ids) > max_tokens:
        message["content"] = tokenizer.decode(ids[:max_tokens]) + " ...[truncated]"
    return message


@dataclasses.dataclass
class Segment:
    ids: list[int]
    kind: SegmentKind
    logprobs: list[float] | None = None  # replies: the sampler's logprob of each id
    versions: list[int] | None = None  # replies: the policy weight version that sampled each id
    in_training: bool = True  # part of the training sequence
    masked: bool = False  # in the sequence without loss

    @property
    def trained(self) -> bool:
        return self.kind == "reply" and self.in_training and not self.masked


def reply_text(tokenizer: Tokenizer, ids: Sequence[int], stopped: bool) -> str:
    """The text of a sampled reply: its ids less the stop token a stopped reply ends with."""
    body = list(ids)
    if stopped:
        if not body or body[-1] not in tokenizer.stop_ids:
            raise ValueError("a stopped reply must end with a stop token")
        body = body[:-1]
    return tokenizer.decode(body)


class Conversation:
    """One episode's segments and the messages they render (for the template's continuations)."""

    def __init__(self, tokenizer: Tokenizer, opening: Sequence[Mapping[str, Any]],
                 tools: Sequence[Mapping[str, Any]] | None = None):
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None  # fixed for the episode: keeps prefixes stable
        self.messages: list[dict[str, Any]] = [dict(m) for m in opening]
        prompt = tokenizer.chat_ids(self.messages, self.tools, add_generation_prompt=True)
        self.segments: list[Segment] = [Segment(prompt, "prompt")]
        self._unsent: list[int] = []  # appended ids the sampler has not been given yet

    @property
    def num_tokens(self) -> int:
        return sum(len(s.ids) for s in self.segments)

    def add_reply(self, ids: Sequence[int], logprobs: Sequence[float], stopped: bool,
                  versions: Sequence[int] = ()) -> str:
        """Appends a sampled reply; one cut off before its stop token is closed with one (not
        trained on: the policy did not produce it, but the next reply is conditioned on it, so
        `add_observations` hands it to the sampler first). `versions`: the policy version of
        each id (empty: unversioned, -1 each). Returns the reply's text."""
        if len(ids) != len(logprobs) or (versions and len(versions) != len(ids)):
            raise ValueError(f"reply has {len(ids)} ids but {len(logprobs)} logprobs and "
                             f"{len(versions)} versions")
        text = reply_text(self.tokenizer, ids, stopped)
        self.segments.append(Segment(list(ids), "reply", list(logprobs),
                                     list(versions) or [-1] * len(ids)))
        if not stopped:
            self.segments.append(Segment([self.tokenizer.reply_end_id], "closing"))
            self._unsent = [self.tokenizer.reply_end_id]
        self.messages.append({"role": "assistant", "content": text})
        return text

    def add_observations(self, messages: Sequence[Mapping[str, Any]],
                         max_tokens: int | None = None) -> list[int] | None:
        """Appends what the environment answered and the next reply's header; returns what the
        sampler must be extended with (a cut-off reply's closing token, then the new ids), or
        None, appending nothing, when the conversation would exceed `max_tokens`."""
        ids = self.tokenizer.continuation_ids(self.messages, messages, self.tools)
        if max_tokens is not None and self.num_tokens + len(ids) > max_tokens:
            return None
        self.messages.extend(dict(m) for m in messages)
        self.segments.append(Segment(ids, "observation"))
        chunk, self._unsent = self._unsent + ids, []
        return chunk

    def fits(self, messages: Sequence[Mapping[str, Any]], max_tokens: int) -> bool:
        """Whether `add_observations(messages, max_tokens)` would append them."""
        ids = self.tokenizer.continuation_ids(self.messages, messages, self.tools)
        return self.num_tokens + len(ids) <= max_tokens

    def exclude(self, first: int, mode: str) -> None:
        """Segments from `first` on, a failed attempt and its feedback: "mask" keeps them in the
        training sequence without loss, "drop" leaves them out, "keep" changes nothing."""
        for segment in self.segments[first:]:
            if mode == "mask":
                segment.masked = True
            elif mode == "drop":
                segment.in_training = False

    def training_ids(self, upto: int | None = None) -> list[int]:
        """The training sequence's ids, or those of the segments before index `upto`."""
        return [t for s in self.segments[:upto] if s.in_training for t in s.ids]

    def reply_ends(self) -> list[int]:
        """Per segment: the training-sequence position of the last token of the latest reply in
        the training sequence at or before it (where a reward for that reply is placed), or,
        before any, of the last token so far (the prompt's)."""
        ends, position, reply_end = [], 0, None
        for s in self.segments:
            if s.in_training and s.ids:
                position += len(s.ids)
                if s.kind == "reply":
                    reply_end = position - 1
            ends.append(position - 1 if reply_end is None else reply_end)
        return ends

    def training_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, loss mask, sampler logprobs) of the training sequence; the mask is 1 exactly
        on reply tokens, the logprobs 0 elsewhere."""
        tokens, mask, logprobs = [], [], []
        for s in self.segments:
            if not s.in_training:
                continue
            tokens += s.ids
            mask += [float(s.trained)] * len(s.ids)
            logprobs += s.logprobs if s.trained else [0.0] * len(s.ids)
        return (np.asarray(tokens, np.int32), np.asarray(mask, np.float32),
                np.asarray(logprobs, np.float32))

    def training_versions(self) -> np.ndarray:
        """[tokens] int32 along the training sequence: the policy version that sampled each
        reply token (masked attempts included), -1 on every token not sampled."""
        return np.asarray([v for s in self.segments if s.in_training
                           for v in (s.versions if s.kind == "reply" else [-1] * len(s.ids))],
                          np.int32)
