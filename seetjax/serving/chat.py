"""OpenAI messages in, token ids out, and the reply back as content or tool calls.

Prompts are rendered by the model's own chat template with its tools section, as the rollout
renders them (`Tokenizer.chat_ids`); assistant `tool_calls` go to the template with their JSON
arguments decoded, as transformers' templates expect. Replies are read with
`seetjax.tools.calls.parse_tool_calls` (hermes blocks, BFCL's python lists, JSON objects); a reply
that does not parse, or calls a function the request did not declare, is returned as content.
Model text is never evaluated. The same reply streamed as it decodes: `chat_stream.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
import string
from typing import Any

from seetjax.models.tokenizer import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, Tokenizer
from seetjax.serving.errors import APIError
from seetjax.serving.json_grammar import NFA, schema_nfa, value
from seetjax.serving.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    NamedToolChoice,
    SystemMessage,
    ToolMessage,
)
from seetjax.serving.token_fsm import TokenFSM, Vocabulary, compile_fsm
from seetjax.serving.token_text import TokenText
from seetjax.tools.calls import ParseError, ToolCall, parse_tool_calls

_ID_ALPHABET = string.ascii_letters + string.digits


def tool_call_id() -> str:
    """A fresh id in OpenAI's form, call_ + 24 characters."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclasses.dataclass(frozen=True)
class Prompt:
    ids: list[int]
    constraint: TokenFSM | None = None  # what the reply must be (a forced tool call)


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
        """The prompt's token ids; with a named or required tool choice, the automaton the
        reply must follow (one call in the template's own form)."""
        messages = self.template_messages(request)
        tools = [t.raw for t in request.tools] if request.tools else None
        try:
            text = self.tokenizer.chat_text(messages, tools, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template's own raise_exception, bad roles...
            raise APIError(400, f"The chat template rejected the messages: {e}",
                           param="messages", code="invalid_value") from None
        return Prompt(self.tokenizer.encode(text),
                      self.forced_call(request) or self.json_reply(request))

    def json_reply(self, request: ChatCompletionRequest) -> TokenFSM | None:
        """With a JSON response_format, the token automaton of JSON valid under its schema
        (`json_grammar.py`); None otherwise."""
        if request.json_schema is None:
            return None
        try:
            return self._json_fsm(json.dumps(request.json_schema))
        except ValueError as e:
            raise APIError(400, str(e).replace("schema", "response_format.json_schema.schema", 1),
                           param="response_format", code="invalid_value") from None

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one instance per server
    def _json_fsm(self, schema: str) -> TokenFSM:
        # A JSON reply has no marked literal, so none of the template's own tokens.
        return compile_fsm(schema_nfa(json.loads(schema)), self.vocabulary,
                           self.template_token_ids)

    @functools.cached_property
    def template_token_ids(self) -> list[int]:
        """The tokenizer's added tokens but its stop tokens: the template's markers
        (`<tool_call>`, ...; added, not "special", so `vocabulary` keeps them), which
        constrained decoding allows in a forced call's opening and closing alone."""
        stops = set(self.tokenizer.stop_ids)
        return sorted(set(self.tokenizer.hf.get_added_vocab().values()) - stops)

    def forced_call(self, request: ChatCompletionRequest) -> TokenFSM | None:
        """With tool_choice "required" or a named function, the token automaton of one call
        (of any tool, or of the named one) written as the template writes calls, its arguments
        valid under the tool's parameters schema (`json_grammar.py`); None otherwise."""
        if not request.tools or not (request.tool_choice == "required"
                                     or isinstance(request.tool_choice, NamedToolChoice)):
            return None
        if self.call_parts is None:
            raise APIError(400, "tool_choice: this model's chat template does not render tool "
                           "calls, so none can be forced", param="tool_choice",
                           code="invalid_value")
        named = (request.tool_choice.function.name
                 if isinstance(request.tool_choice, NamedToolChoice) else None)
        tools = [(i, t.function) for i, t in enumerate(request.tools)
                 if named is None or t.function.name == named]
        key = json.dumps([[i, f.name, f.parameters] for i, f in tools])  # key order matters
        try:
            return self._call_fsm(key)
        except ValueError as e:
            raise APIError(400, str(e), param="tools", code="invalid_value") from None

    @functools.lru_cache(maxsize=64)  # noqa: B019 - one instance per server
    def _call_fsm(self, key: str) -> TokenFSM:
        before_name, after_name, after_args = self.call_parts
        nfa = NFA()
        opened = nfa.literal(nfa.start, before_name, marked=True)

        def call(index: int, name: str, parameters: dict[str, Any] | None):
            # No parameters: an empty list of them (OpenAI's reading).
            schema = {"type": "object", "properties": {}} if parameters is None else parameters
            where = f"tools[{index}].function.parameters"
            return lambda a: value(nfa, nfa.literal(a, name + after_name), schema, where)

        called = nfa.alternatives(opened, [call(*tool) for tool in json.loads(key)])
        nfa.final = nfa.literal(called, after_args, marked=True)
        return compile_fsm(nfa, self.vocabulary, self.template_token_ids)

    @functools.cached_property
    def vocabulary(self) -> Vocabulary:
        """What each token writes, for constrained decoding: special tokens and pieces of a
        UTF-8 character are never chosen there."""
        special = set(self.tokenizer.hf.all_special_ids)
        token_text = TokenText(self.tokenizer)

        def text(token: int) -> str | None:
            if token in special:
                return None
            try:
                return bytes(token_text.bytes(token)).decode("utf-8")
            except UnicodeDecodeError:
                return None

        return Vocabulary([text(i) for i in range(len(self.tokenizer))],
                          self.tokenizer.stop_ids, len(self.tokenizer))

    # ------------------------------------------------------------------ replies

    def tools_active(self, request: ChatCompletionRequest) -> bool:
        """Whether a reply may hold calls (not with tool_choice none, nor when it must be
        JSON of a response_format)."""
        return (bool(request.tools) and request.tool_choice != "none"
                and request.json_schema is None)

    def reply(self, request: ChatCompletionRequest, text: str, finish_reason: str) -> Reply:
        """A generated text as content and/or tool calls. A reply cut
        at its token limit is content: its last call may be cut too."""
        if not self.tools_active(request) or finish_reason != "stop":
            return Reply(text, [])
        if self.call_parts is not None and (request.tool_choice == "required" or isinstance(
                request.tool_choice, NamedToolChoice)):
            return self._forced_reply(text)
        calls = parse_tool_calls(text, "auto")
        declared = {t.function.name for t in request.tools or []}
        if isinstance(request.tool_choice, NamedToolChoice):
            declared = {request.tool_choice.function.name}
        if (isinstance(calls, ParseError) or not calls
                or any(c.name not in declared or c.positional for c in calls)):
            return Reply(text, [])
        # The text around the calls, less the whitespace before them that the template writes
        # itself when it renders the message again (content, newline, calls).
        content = outside_calls(text).rstrip() if TOOL_CALL_OPEN in text else ""
        return Reply(content if content.strip() else None, [openai_tool_call(c) for c in calls])


    def _forced_reply(self, text: str) -> Reply:
        """A forced call, read by the form its automaton gave it (`forced_call`), not by a
        parser: its strings may hold anything, `</tool_call>` included."""
        before_name, after_name, after_args = self.call_parts
        name, _, rest = text[len(before_name):].partition(after_name)  # names have no quotes
        try:
            _, end = json.JSONDecoder().raw_decode(rest)
        except json.JSONDecodeError:
            end = -1
        if end < 0 or rest[end:] != after_args:  # cut short by a stop string: not a call
            return Reply(text, [])
        # The arguments as written (valid JSON by construction), as they were streamed.
        return Reply(None, [{"id": tool_call_id(), "type": "function",
                             "function": {"name": name, "arguments": rest[:end]}}])


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """A parsed call in OpenAI's response form, with a fresh id."""
    return {"id": tool_call_id(), "type": "function",
            "function": {"name": call.name,
                         "arguments": json.dumps(dict(call.args), ensure_ascii=False)}}


def outside_calls(text: str) -> str:
    """The text with every <tool_call>...</tool_call> block removed (an unclosed one runs to the
    end)."""
    out, end = [], 0
    while (opened := text.find(TOOL_CALL_OPEN, end)) >= 0:
        out.append(text[end:opened])
        closed = text.find(TOOL_CALL_CLOSE, opened)
        if closed < 0:
            return "".join(out)
        end = closed + len(TOOL_CALL_CLOSE)
    out.append(text[end:])
    return "".join(out)


def _call_parts(tokenizer: Tokenizer) -> tuple[str, str, str] | None:
    """How the template writes a tool call, split around the function name and the arguments
    (before the name, between it and the arguments, after them up to the end of the turn):
    rendered from a placeholder call, so it holds for any template that renders `tool_calls`
    (None otherwise)."""
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
    brace, closed = reply.rfind("{", 0, arg), reply.find("}", arg)
    if at < 0 or arg < 0 or brace < at + len(name) or closed < 0:
        return None
    after = reply[closed + 1:]
    ends = [i for t in tokenizer.stop_ids if (i := after.find(tokenizer.decode([t]))) >= 0]
    return reply[:at], reply[at + len(name):brace], after[:min(ends, default=len(after))]
