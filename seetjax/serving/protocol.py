"""OpenAI chat-completions schema: typed pydantic models of requests (validated strictly, so a
wrong type is a 400 naming its field, never coerced) and of responses."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

MAX_STOP_STRINGS = 4  # OpenAI's limit
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")


class _Strict(BaseModel):
    # Unknown fields are ignored (clients send many we do not use); known ones are typed strictly.
    model_config = ConfigDict(strict=True, extra="ignore")


def _text(content: Any) -> str:
    """A message's content as text: a string, or a list of text parts (joined with newlines)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(f"part {i} is of type {kind!r}; only text parts are supported")
            if not isinstance(part.get("text"), str):
                raise ValueError(f"part {i} has no string `text`")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ValueError("must be a string or a list of text parts")


class _Message(_Strict):
    content: Any = None

    @field_validator("content")
    @classmethod
    def _content_text(cls, value: Any) -> str | None:
        if value is None:
            if cls is not AssistantMessage:  # only assistant messages may have tool calls alone
                raise ValueError("content is required")
            return None
        return _text(value)


class SystemMessage(_Message):
    role: Literal["system", "developer"]
    content: Any
    name: str | None = None


class UserMessage(_Message):
    role: Literal["user"]
    content: Any
    name: str | None = None


class FunctionCall(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCallParam(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(_Message):
    role: Literal["assistant"]
    tool_calls: list[ToolCallParam] | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _something(self) -> AssistantMessage:
        if self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self


class ToolMessage(_Message):
    role: Literal["tool"]
    content: Any
    # Optional, as vLLM allows (prompt-style clients send tool results without ids); when given
    # it must name an earlier assistant tool call.
    tool_call_id: str | None = None
    name: str | None = None


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage,
                    Field(discriminator="role")]
ROLES = ("system", "developer", "user", "assistant", "tool")


class FunctionDefinition(_Strict):
    model_config = ConfigDict(strict=True, extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _FUNCTION_NAME.match(value):
            raise ValueError("must be 1-64 characters of a-z, A-Z, 0-9, _, . or -")
        return value


class ToolDefinition(_Strict):
    type: Literal["function"]
    function: FunctionDefinition
    # The client's own dict: the chat template renders it (key order included) as sent.
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_raw(cls, data: Any, handler: Any) -> ToolDefinition:
        model = handler(data)
        if isinstance(data, dict):
            model._raw = data
        return model

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw or self.model_dump(exclude_none=True)


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Strict):
    include_usage: bool = False


class ResponseFormat(_Strict):
    type: str


class ChatCompletionRequest(_Strict):
    """POST /v1/chat/completions. Sampling defaults are OpenAI's (temperature 1, top_p 1)."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)  # an extension, as in vLLM
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    # null is taken as the default (clients send explicit nulls).
    n: int = Field(1, ge=1)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: ResponseFormat | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None
    # Extensions, as in vLLM: the prompt's and each choice's token ids in the response; decoding
    # on past the model's stop tokens (fixed-length outputs, for load tests).
    return_token_ids: bool = False
    ignore_eos: bool = False

    @field_validator("n", "stream", "logprobs", "return_token_ids", "ignore_eos", mode="wrap")
    @classmethod
    def _null_is_default(cls, value: Any, handler: Any, info: Any) -> Any:
        if value is None:
            return cls.model_fields[info.field_name].default
        return handler(value)

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop sequences, got {len(stops)}")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty")
        return stops

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, value: float | None) -> float | None:
        if value:
            raise ValueError("penalties are not supported (only 0)")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value:
            raise ValueError("logit_bias is not supported")
        return value

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: ResponseFormat | None) -> ResponseFormat | None:
        if value is not None and value.type != "text":
            raise ValueError(f"response_format {value.type!r} is not supported (only 'text')")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and self.top_logprobs > 0 and not self.logprobs:
            raise _FieldError("top_logprobs", "top_logprobs needs logprobs=true")
        if self.stream_options is not None and not self.stream:
            raise _FieldError("stream_options", "stream_options needs stream=true")
        if isinstance(self.tool_choice, NamedToolChoice) or self.tool_choice == "required":
            names = {t.function.name for t in self.tools or []}
            if not names:
                raise _FieldError("tool_choice", "tool_choice names a tool but no tools are given")
            if (isinstance(self.tool_choice, NamedToolChoice)
                    and self.tool_choice.function.name not in names):
                raise _FieldError("tool_choice", f"tool_choice names "
                                  f"{self.tool_choice.function.name!r}, which is not in tools")
        return self

    @property
    def completion_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens


class _FieldError(ValueError):
    """A cross-field check failing on a named field (reported as that field, not the body)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


# ------------------------------------------------------------------------------- responses


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelCard(_Out):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "seetjax"
    max_model_len: int | None = None


class ModelList(_Out):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TopLogprob(_Out):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(_Out):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(_Out):
    content: list[TokenLogprob]


class FunctionCallOut(_Out):
    name: str | None = None
    arguments: str


class ToolCallOut(_Out):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class ResponseMessage(_Out):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class Choice(_Out):
    index: int
    message: ResponseMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None


class PromptTokensDetails(_Out):
    cached_tokens: int


class Usage(_Out):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class ChatCompletion(_Out):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    prompt_token_ids: list[int] | None = None


class ToolCallDelta(_Out):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallOut | None = None


class Delta(_Out):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(_Out):
    index: int
    delta: Delta
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(_Out):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
