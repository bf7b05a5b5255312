"""Tokenizers: any Hugging Face tokenizer directory, and the offline BPE builder.

`Tokenizer` wraps a transformers fast tokenizer with what the rest of seetjax needs: ids in and out,
chat templates with tools, the stop tokens of a chat turn. `train_bpe_tokenizer` trains a byte-level
BPE with `tokenizers` and gives it `CHAT_TEMPLATE`, a ChatML-style template with system, user,
assistant (with tool calls) and tool roles.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from seetjax.models.transformers_lib import transformers

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
# Tokens that end an assistant turn in the chat formats we know (ChatML, Llama 3).
_TURN_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|end_of_text|>")

# Our own ChatML-style template. Tool docs go in the system message as one JSON object per line;
# each assistant tool call is a <tool_call>{"name": ..., "arguments": {...}}</tool_call> block;
# tool results are messages of role `tool`. Rendering is prefix-stable: a conversation rendered
# with add_generation_prompt is a prefix of the same conversation with the reply appended.
CHAT_TEMPLATE = (
    # transformers renders with trim_blocks, so a newline right after a block tag is written as
    # an expression, {{ '\n' }}.
    "{% set sys = messages[0].content if messages and messages[0].role == 'system' else none %}"
    "{% if sys is not none or tools %}<|im_start|>system\n"
    "{% if sys is not none %}{{ sys }}{% endif %}"
    "{% if tools %}{% if sys is not none %}{{ '\n\n' }}{% endif %}"
    "You may call the tools below; each is a JSON object on its own line.\n<tools>"
    "{% for tool in tools %}{{ '\n' }}"
    "{{ (tool.function if tool.function is defined else tool) | tojson }}{% endfor %}"
    "{{ '\n' }}</tools>\nCall a tool with "
    "<tool_call>{\"name\": <name>, \"arguments\": <arguments as JSON>}</tool_call>, "
    "one block per call.{% endif %}<|im_end|>{{ '\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' and loop.first %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.content %}{{ m.content }}{% endif %}"
    "{% for call in m.tool_calls or [] %}"
    "{% set f = call.function if call.function is defined else call %}"
    "{% if not loop.first or m.content %}{{ '\n' }}{% endif %}"
    "<tool_call>{\"name\": {{ f.name | tojson }}, \"arguments\": "
    "{% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
    "}</tool_call>{% endfor %}<|im_end|>{{ '\n' }}"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{{ '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class Tokenizer:
    """A transformers fast tokenizer plus chat helpers; token ids in, token ids out."""

    def __init__(self, hf_tokenizer: transformers.PreTrainedTokenizerBase):
        self.hf = hf_tokenizer
        if hf_tokenizer.chat_template is None:
            raise ValueError("tokenizer has no chat template")
        added = hf_tokenizer.added_tokens_encoder
        self.stop_ids: tuple[int, ...] = tuple(sorted(
            {i for i in (hf_tokenizer.eos_token_id, *map(added.get, _TURN_END_TOKENS))
             if i is not None}))
        if not self.stop_ids:
            raise ValueError("tokenizer has neither an eos token nor a known end-of-turn token")
        self.pad_id: int = (hf_tokenizer.pad_token_id if hf_tokenizer.pad_token_id is not None
                            else self.stop_ids[0])

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> Tokenizer:
        """Loads a local HF tokenizer directory (never from a hub) as AutoTokenizer does."""
        return cls(_tokenizer_class(Path(path)).from_pretrained(os.fspath(path),
                                                                local_files_only=True))

    def save_pretrained(self, path: str | os.PathLike) -> None:
        self.hf.save_pretrained(os.fspath(path))

    def __len__(self) -> int:
        return len(self.hf)

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; special-token strings in it map to their ids, nothing is added.
        transformers' warning about texts over the model's context is off: texts are encoded
        whole before a cut (a long tool observation), and episode and SFT token limits keep what
        reaches the model within its context."""
        return self.hf.encode(text, add_special_tokens=False, verbose=False)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def chat_text(self, messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[Mapping[str, Any]] | None = None,
                  add_generation_prompt: bool = False) -> str:
        return self.hf.apply_chat_template(list(messages), tools=list(tools) if tools else None,
                                           add_generation_prompt=add_generation_prompt,
                                           tokenize=False)

    def chat_ids(self, messages: Sequence[Mapping[str, Any]],
                 tools: Sequence[Mapping[str, Any]] | None = None,
                 add_generation_prompt: bool = False) -> list[int]:
        return self.encode(self.chat_text(messages, tools, add_generation_prompt))

    def encode_messages(self, messages: Sequence[Mapping[str, Any]],
                        tools: Sequence[Mapping[str, Any]] | None = None) -> EncodedChat:
        """Ids of a whole conversation with a loss mask that is 1 exactly on what the model
        generates: each assistant reply after its generation header, up to and including the
        first stop token.

        Built from the template's own renderings (prefix i+1 minus prefix i) at each reply and
        at the end of each run of other messages, as a rollout appends them: a template may join
        a run (Qwen2.5 puts consecutive tool results in one user turn) or need it whole (Llama
        3.1 renders tools only with the first user message), so a message inside a run ends where
        its run does. Then checked against the ids of the whole rendering, so a template that is
        not prefix-stable, or segments that tokenise differently apart, fail loudly here instead
        of training on drifted tokens.
        """
        ids: list[int] = []
        mask: list[int] = []
        ends: list[int] = []
        done = ""  # the rendering of the messages encoded so far
        for i, message in enumerate(messages):
            if message["role"] != "assistant" and i + 1 < len(messages) and (
                    messages[i + 1]["role"] != "assistant"):
                continue  # rendered with the rest of its run
            if message["role"] == "assistant":
                header = self._suffix(done, self.chat_text(messages[:i], tools, True), i)
                ids += (header_ids := self.encode(header))
                mask += [0] * len(header_ids)
                done += header
            rendered = self.chat_text(messages[:i + 1], tools)
            segment = self.encode(self._suffix(done, rendered, i))
            trained = 0
            if message["role"] == "assistant":
                stops = [k for k, t in enumerate(segment) if t in self.stop_ids]
                trained = stops[0] + 1 if stops else len(segment)
            ids += segment
            mask += [1] * trained + [0] * (len(segment) - trained)
            ends += [len(ids)] * (i + 1 - len(ends))
            done = rendered
        if ids != self.encode(done):
            raise ValueError("chat template segments tokenise differently from the whole "
                             "conversation; token-in/token-out training data would drift")
        return EncodedChat(ids=ids, loss_mask=mask, message_ends=ends)

    def continuation_ids(self, history: Sequence[Mapping[str, Any]],
                         new_messages: Sequence[Mapping[str, Any]],
                         tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """The ids that follow an assistant reply, as generated up to and including its stop
        token, to append `new_messages` and open the next reply. `history` ends with that reply
        (its text); nothing before it is re-encoded."""
        before = self.chat_text(history, tools)
        after = self.chat_text([*history, *new_messages], tools, add_generation_prompt=True)
        return self.encode(self._after_stop + self._suffix(before, after, len(history)))

    @property
    def reply_end_id(self) -> int:
        """The stop token the chat template closes assistant replies with."""
        return self._reply_closing[0]

    @property
    def _after_stop(self) -> str:
        """What the template writes after a reply's stop token (ChatML: a newline)."""
        return self._reply_closing[1]

    @functools.cached_property
    def _reply_closing(self) -> tuple[int, str]:
        placeholder = "\u2063reply\u2063"
        text = self.chat_text([{"role": "user", "content": "q"},
                               {"role": "assistant", "content": placeholder}])
        tail = text[text.index(placeholder) + len(placeholder):]
        ends = [(tail.find(token), token, i) for i in self.stop_ids
                for token in [self.hf.convert_ids_to_tokens(i)] if token and token in tail]
        if not ends:
            raise ValueError("the chat template closes assistant replies with no stop token")
        position, token, token_id = min(ends)
        return token_id, tail[position + len(token):]

    @staticmethod
    def _suffix(prefix: str, text: str, index: int) -> str:
        if not text.startswith(prefix):
            at = next((k for k, (a, b) in enumerate(zip(prefix, text)) if a != b), len(text))
            raise ValueError(
                f"chat template is not prefix-stable at message {index}: rendering more messages "
                f"changed the text of earlier ones (character {at}: {prefix[at:at + 40]!r} became "
                f"{text[at:at + 40]!r}); token-in/token-out needs a template that only appends")
        return text[len(prefix):]


@dataclasses.dataclass(frozen=True)
class EncodedChat:
    """A conversation as token ids; `loss_mask[i]` is 1 on tokens the model itself produced;
    `message_ends[k]` is the number of ids up to the end of message k (of its run of non-assistant
    messages: see `Tokenizer.encode_messages`)."""

    ids: list[int]
    loss_mask: list[int]
    message_ends: list[int]


def _tokenizer_class(path: Path) -> type:
    """`Qwen2Tokenizer` for a qwen2 model directory without tokenizer code of its own, else
    `AutoTokenizer`. AutoTokenizer picks Qwen2Tokenizer there whatever tokenizer_config.json names
    (qwen2 is among the model types whose declared tokenizer class it overrides); naming the class
    spares importing AutoTokenizer's module, which imports transformers' configuration classes and
    with them torch (about 1.5 s a launch)."""
    def read(name: str) -> dict[str, Any]:
        file = path / name
        return json.loads(file.read_text()) if file.is_file() else {}

    if (read("config.json").get("model_type") == "qwen2"
            and "auto_map" not in read("tokenizer_config.json")):
        return transformers.Qwen2Tokenizer
    return transformers.AutoTokenizer


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int,
                        chat_template: str = CHAT_TEMPLATE) -> Tokenizer:
    """Trains a byte-level BPE (Sennrich et al. 2016; GPT-2 byte alphabet) on `texts`.

    The normalizer and pre-tokenizer are those of transformers' Qwen2Tokenizer: `AutoTokenizer`
    rebuilds the tokenizer of a qwen2 directory with that pipeline, so sharing it is what makes a
    saved directory give the same ids everywhere. Deterministic for the same texts in the same
    order. Chat tokens are special (never split); the tool-call tags are ordinary added tokens,
    kept when special tokens are skipped.
    """
    reference = transformers.Qwen2Tokenizer().backend_tokenizer
    tok = tokenizers.Tokenizer(models.BPE())
    tok.normalizer = reference.normalizer
    tok.pre_tokenizer = reference.pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    specials = [PAD_TOKEN, IM_START, IM_END]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([TOOL_CALL_OPEN, TOOL_CALL_CLOSE])
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=PAD_TOKEN, bos_token=None,
        chat_template=chat_template, model_max_length=32768, clean_up_tokenization_spaces=False)
    return Tokenizer(hf)
