"""OpenAI messages in, token ids out, and the reply back as content or tool calls.

Prompts are rendered by the model's own chat template with its tools section, as the rollout
renders them (`Tokenizer.chat_ids`); assistant `tool_calls` go to the template with their JSON
arguments decoded, as transformers' templates expect. Replies are read with
`seetjax.tools.calls.parse_tool_calls` (hermes blocks, BFCL's python lists, JSON objects); a reply
that does not parse, or calls a function the request did not declare, is returned as content.
Model text is never evaluated.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import secrets
import string
from collections.abc import Sequence
from typing import Any

from seetjax.models.tokenizer import Tokenizer
from seetjax.serving.errors import APIError
from seetjax.serving.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    NamedToolChoice,
    SystemMessage,
    ToolMessage,
)
from seetjax.tools.calls import ParseError, ToolCall, parse_tool_calls

_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_CALL_START = re.compile(r"[A-Za-z_][\w.]*\(")  # `name(`: a python-format call begins
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*\Z")  # could still become `name(`
_ID_ALPHABET = string.ascii_letters + string.digits


def tool_call_id() -> str:
    """A fresh id in OpenAI's form, call_ + 24 characters."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclasses.dataclass(frozen=True)
class Prompt:
    ids: list[int]
    forced: str  # text the reply was made to start with (a forced tool call's opening)


def min_context(tokenizer: Tokenizer) -> int:
    """The least context a server can answer in: the prompt of one empty user message, as the
    chat template renders it, and one reply token."""
    return len(tokenizer.chat_ids([{"role": "user", "content": ""}],
                                  add_generation_prompt=True)) + 1


@dataclasses.dataclass(frozen=True)
class Reply:
    content: str | None
    tool_calls: list[dict[str, Any]]

    @property
    def finish_reason(self) -> str | None:
        return "tool_calls" if self.tool_calls else None


class ChatFormat:
    """The model's chat template as the server uses it."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.call_parts = _call_parts(tokenizer)

    # ------------------------------------------------------------------ prompts

    def template_messages(self, request: ChatCompletionRequest) -> list[dict[str, Any]]:
        """The messages as the template reads them; bad references are 400s naming the field."""
        out: list[dict[str, Any]] = []
        call_names: dict[str, str] = {}
        for i, m in enumerate(request.messages):
            if isinstance(m, SystemMessage):
                out.append({"role": "system", "content": m.content})
            elif isinstance(m, AssistantMessage):
                message: dict[str, Any] = {"role": "assistant", "content": m.content}
                if m.tool_calls:
                    calls = []
                    for j, call in enumerate(m.tool_calls):
                        try:
                            arguments = json.loads(call.function.arguments or "{}")
                        except json.JSONDecodeError as e:
                            raise APIError(
                                400, f"messages[{i}].tool_calls[{j}].function.arguments is not "
                                f"valid JSON: {e}",
                                param=f"messages[{i}].tool_calls[{j}].function.arguments",
                                code="invalid_value") from None
                        if not isinstance(arguments, dict):
                            raise APIError(
                                400, f"messages[{i}].tool_calls[{j}].function.arguments must be a "
                                "JSON object", code="invalid_value",
                                param=f"messages[{i}].tool_calls[{j}].function.arguments")
                        call_names[call.id] = call.function.name
                        calls.append({"id": call.id, "type": "function",
                                      "function": {"name": call.function.name,
                                                   "arguments": arguments}})
                    message["tool_calls"] = calls
                out.append(message)
            elif isinstance(m, ToolMessage):
                message = {"role": "tool", "content": m.content}
                if m.tool_call_id is not None:
                    if m.tool_call_id not in call_names:
                        raise APIError(400, f"messages[{i}].tool_call_id {m.tool_call_id!r} "
                                       "answers no earlier assistant tool call",
                                       param=f"messages[{i}].tool_call_id", code="invalid_value")
                    message["tool_call_id"] = m.tool_call_id
                    message["name"] = m.name or call_names[m.tool_call_id]
                elif m.name:
                    message["name"] = m.name
                out.append(message)
            else:
                out.append({"role": m.role, "content": m.content})
        return out

    def prompt(self, request: ChatCompletionRequest) -> Prompt:
        """The prompt's token ids; with a named or required tool choice, the reply is opened
        with the template's own tool-call opening (and the function's name)."""
        messages = self.template_messages(request)
        tools = [t.raw for t in request.tools] if request.tools else None
        try:
            text = self.tokenizer.chat_text(messages, tools, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template's own raise_exception, bad roles...
            raise APIError(400, f"The chat template rejected the messages: {e}",
                           param="messages", code="invalid_value") from None
        forced = self.forced_opening(request)
        return Prompt(self.tokenizer.encode(text + forced), forced)

    def forced_opening(self, request: ChatCompletionRequest) -> str:
        if self.call_parts is None or not request.tools:
            return ""
        before_name, after_name = self.call_parts
        # Trailing whitespace is left to the model: BPE vocabularies glue a space to the token
        # after it (' {"'), so a forced lone ' ' would be a token the model never saw there.
        if isinstance(request.tool_choice, NamedToolChoice):
            return (before_name + request.tool_choice.function.name + after_name).rstrip()
        if request.tool_choice == "required":
            return before_name.rstrip()
        return ""

    # ------------------------------------------------------------------ replies

    def tools_active(self, request: ChatCompletionRequest) -> bool:
        return bool(request.tools) and request.tool_choice != "none"

    def reply(self, request: ChatCompletionRequest, text: str, finish_reason: str) -> Reply:
        """A generated text (with any forced opening) as content and/or tool calls. A reply cut
        at its token limit is content: its last call may be cut too."""
        if not self.tools_active(request) or finish_reason != "stop":
            return Reply(text, [])
        calls = parse_tool_calls(text, "auto")
        declared = {t.function.name for t in request.tools or []}
        if isinstance(request.tool_choice, NamedToolChoice):
            declared = {request.tool_choice.function.name}
        if (isinstance(calls, ParseError) or not calls
                or any(c.name not in declared or c.positional for c in calls)):
            return Reply(text, [])
        # The text around the calls, less the whitespace before them that the template writes
        # itself when it renders the message again (content, newline, calls).
        content = _outside_calls(text).rstrip() if _HERMES_OPEN in text else ""
        return Reply(content if content.strip() else None, [openai_tool_call(c) for c in calls])


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """A parsed call in OpenAI's response form, with a fresh id."""
    return {"id": tool_call_id(), "type": "function",
            "function": {"name": call.name,
                         "arguments": json.dumps(dict(call.args), ensure_ascii=False)}}


def _outside_calls(text: str) -> str:
    """The text with every <tool_call>...</tool_call> block removed."""
    out, end = [], 0
    while (opened := text.find(_HERMES_OPEN, end)) >= 0:
        out.append(text[end:opened])
        closed = text.find(_HERMES_CLOSE, opened)
        if closed < 0:
            return "".join(out)
        end = closed + len(_HERMES_CLOSE)
    out.append(text[end:])
    return "".join(out)


def _call_parts(tokenizer: Tokenizer) -> tuple[str, str] | None:
    """How the template opens a tool call, split around the function name: rendered from a
    placeholder call, so it holds for any template that renders `tool_calls` (None otherwise)."""
    name, key = "zqxfunctionzqx", "zqxargumentzqx"
    head = [{"role": "user", "content": "q"}]
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": {key: 1}}}
    try:
        start = tokenizer.chat_text(head, add_generation_prompt=True)
        full = tokenizer.chat_text(head + [{"role": "assistant", "content": None,
                                            "tool_calls": [call]}])
    except Exception:  # noqa: BLE001 - a template without tool calls
        return None
    if not full.startswith(start):
        return None
    reply = full[len(start):]
    at, arg = reply.find(name), reply.find(key)
    brace = reply.rfind("{", 0, arg)
    if at < 0 or arg < 0 or brace < at + len(name):
        return None
    return reply[:at], reply[at + len(name):brace]


class ContentStream:
    """Releases a choice's text as streamed content. With tools active, text that is or may
    become a tool call waits for the end of the reply (then it goes out as tool_calls, or as
    content when it does not parse), and so does trailing whitespace (`ChatFormat.reply` drops
    it before a call), so the streamed content is always the start of the final content."""

    def __init__(self, tools_active: bool, forced: str = ""):
        self.tools_active = tools_active
        self.text = forced
        self.sent = ""
        self._holding = bool(forced)  # a forced call opening: all of it is a call

    def feed(self, delta: str) -> str:
        self.text += delta
        if not self.tools_active:
            out, self.sent = self.text[len(self.sent):], self.text
            return out
        if self._holding:
            return ""
        body = self.text
        head = body.lstrip()
        if head.startswith(("[", "{")) or _CALL_START.match(head):
            self._holding = True  # python or JSON calls: the whole message is the call
            return ""
        if not head or _IDENTIFIER.match(head):
            return ""  # nothing yet, or `name` that may become `name(`
        opened = body.find(_HERMES_OPEN)
        if opened >= 0:
            body = body[:opened]
        else:
            body = body[:len(body) - _partial_suffix(body, _HERMES_OPEN)]
        body = body.rstrip()  # trailing whitespace waits: it is stripped before a call
        if len(body) <= len(self.sent):
            return ""
        out, self.sent = body[len(self.sent):], body
        return out

    def finish(self, final_content: str | None) -> str:
        """The rest of the final content (what the full reply gives) not streamed yet."""
        final = final_content or ""
        if final.startswith(self.sent):
            return final[len(self.sent):]
        return ""  # cannot happen with the rules above; never send contradicting text


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class TokenText:
    """Each token's text and raw bytes, for logprobs (a byte-level BPE token may be part of a
    UTF-8 character: its `bytes` are exact, its text is what decoding it alone gives)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self._byte_of = {c: b for b, c in _bytes_to_unicode().items()}

    @functools.lru_cache(maxsize=65_536)  # noqa: B019 - one instance per server
    def text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    @functools.lru_cache(maxsize=65_536)  # noqa: B019
    def bytes(self, token_id: int) -> list[int]:
        piece = self.tokenizer.hf.convert_ids_to_tokens(token_id)
        if isinstance(piece, str) and piece and all(c in self._byte_of for c in piece):
            return [self._byte_of[c] for c in piece]
        return list(self.text(token_id).encode("utf-8"))

    def logprobs(self, token_ids: Sequence[int], logprobs: Sequence[float],
                 tops: Sequence[Sequence[tuple[int, float]]]) -> list[dict[str, Any]]:
        """OpenAI's `logprobs.content` entries."""
        return [{"token": self.text(t), "logprob": lp, "bytes": self.bytes(t),
                 "top_logprobs": [{"token": self.text(a), "logprob": alp, "bytes": self.bytes(a)}
                                  for a, alp in top]}
                for t, lp, top in zip(token_ids, logprobs, tops)]


@functools.lru_cache(maxsize=1)
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> the printable character a byte-level BPE uses."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}
