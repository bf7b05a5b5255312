"""Dialogs -> token ids and loss weights with the tokenizer's chat template (token in, token out).

The ids come from `Tokenizer.encode_messages`, which renders the conversation reply by reply,
masks exactly the tokens the assistant generates (after each generation header, up to and
including the stop token) and fails if the pieces tokenise differently from the whole, so no
re-tokenisation drift reaches training. A dialog too long for `max_len` is dropped or, with
`truncate`, cut at the last message boundary that fits; every dialog left out is reported with
its reason. `final_reply_weight` weighs the tokens of a dialog's last reply (its answer, or the
call that ends the task) against the others', whose weight is 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from seetjax.data.dialogs import Dialog, check_unique_ids, lexical_diversity, listing
from seetjax.models.tokenizer import Tokenizer
from seetjax.rollout.chat import cap_observation


@dataclasses.dataclass(frozen=True)
class Example:
    """One formatted dialog: its ids, the loss weight of each (> 0 on assistant-generated tokens,
    else 0), and what task weighting and coreset selection read (task type, loss, length, lexical
    diversity)."""

    id: str
    tokens: np.ndarray  # [n] int32
    loss_mask: np.ndarray  # [n] float32, the weight of each token the model is trained to produce
    task_type: str
    lexical_diversity: float
    loss: float | None = None  # mean per-token loss: from the dialog's metadata, or computed
    truncated: bool = False  # cut at a message boundary to fit max_len

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_trained(self) -> int:
        return int(np.count_nonzero(self.loss_mask))


@dataclasses.dataclass(frozen=True)
class FormatReport:
    """How many dialogs were formatted and which were left out, with the reason."""

    formatted: int
    dropped: dict[str, str]
    truncated: tuple[str, ...] = ()

    def __str__(self) -> str:
        return (f"{self.formatted} dialogs formatted ({len(self.truncated)} truncated), "
                f"{len(self.dropped)} left out" + listing(self.dropped))


def format_dialog(dialog: Dialog, tokenizer: Tokenizer, max_len: int | None = None,
                  truncate: bool = False, max_observation_tokens: int = 0,
                  final_reply_weight: float = 1.0) -> Example | str:
    """The Example of `dialog`, or the reason it is left out: longer than `max_len` tokens
    (unless `truncate`: then cut at the last message boundary that fits) or nothing to train on.
    `max_observation_tokens` > 0 cuts each tool observation as rollouts do (`cap_observation`);
    the last message's tokens weigh `final_reply_weight` when it is a reply that was kept."""
    messages = dialog.messages
    if max_observation_tokens:
        messages = [cap_observation(m, tokenizer, max_observation_tokens) for m in messages]
    chat = tokenizer.encode_messages(messages, dialog.tools)
    length = len(chat.ids)
    if max_len is not None and length > max_len:
        if not truncate:
            return f"{length} tokens > max_len {max_len}"
        length = max((end for end in chat.message_ends if end <= max_len), default=0)
    mask = np.asarray(chat.loss_mask[:length], np.float32)
    if messages[-1]["role"] == "assistant" and length == len(chat.ids):
        start = chat.message_ends[-2] if len(messages) > 1 else 0
        mask[start:] *= final_reply_weight
    if not mask.any():
        return (f"no assistant token within the first {max_len} tokens" if length < len(chat.ids)
                else "no assistant token")
    loss = dialog.metadata.get("loss")
    return Example(id=dialog.id, tokens=np.asarray(chat.ids[:length], np.int32), loss_mask=mask,
                   task_type=dialog.task_type, lexical_diversity=lexical_diversity(dialog),
                   loss=None if loss is None else float(loss), truncated=length < len(chat.ids))


def format_dialogs(dialogs: Sequence[Dialog], tokenizer: Tokenizer, max_len: int | None = None,
                   truncate: bool = False, max_observation_tokens: int = 0,
                   final_reply_weight: float = 1.0) -> tuple[list[Example], FormatReport]:
    """Formats every dialog (ids must be unique); returns the examples and a report naming the
    dialogs left out and those truncated."""
    check_unique_ids(dialogs)
    examples, dropped, truncated = [], {}, []
    for dialog in dialogs:
        example = format_dialog(dialog, tokenizer, max_len, truncate, max_observation_tokens,
                                final_reply_weight)
        if isinstance(example, str):
            dropped[dialog.id] = example
            continue
        examples.append(example)
        if example.truncated:
            truncated.append(dialog.id)
    return examples, FormatReport(len(examples), dropped, tuple(truncated))
