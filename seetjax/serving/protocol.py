"""OpenAI chat-completions schema, the requests: typed pydantic models validated strictly (a wrong
type is a 400 naming its field, never coerced; a field the server does not implement is refused,
never ignored). The responses are in `responses.py`."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from seetjax.serving.requests import MAX_TOP_K

MAX_STOP_STRINGS = 4  # OpenAI's limit
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
_INT64 = 2**63  # OpenAI's bound on seed: [-2**63, 2**63)
# Fields of OpenAI's API that ask for nothing this server lacks only with these values: others
# are refused, never ignored (field: (the values accepted, why others are refused)).
_NO_OP_ONLY: dict[str, tuple[tuple[Any, ...], str]] = {
    "presence_penalty": ((None, 0), "penalties are not implemented"),
    "frequency_penalty": ((None, 0), "penalties are not implemented"),
    "logit_bias": ((None, {}), "logit_bias is not implemented"),
    "parallel_tool_calls": ((None, True), "a reply may hold several tool calls"),
    "modalities": ((None, ["text"]), "replies are text only"),
    "store": ((None, False), "this server stores no completions"),
}


class _Strict(BaseModel):
    # Known fields are typed strictly; unknown ones are refused (a client must not believe that
    # a setting it sent, vLLM's `min_p` say, shaped the reply).
    model_config = ConfigDict(strict=True, extra="forbid")


def _lone_surrogate(body: dict[str, Any]) -> str | None:
    """The path of the first string or key in a JSON object that holds a lone UTF-16 surrogate
    (JSON writes one as "\\ud800"; it is not text: encoding it fails), or None. Keys are named
    with the surrogate escaped."""
    pending: list[tuple[str, Any]] = [("", body)]
    while pending:  # not recursive: a deeply nested body must not overflow the stack
        path, value = pending.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path
            continue
        if isinstance(value, dict):
            children = []
            for key, item in value.items():
                name = key.encode("utf-8", "backslashreplace").decode()
                child = f"{path}.{name}" if path else name
                if name != key:
                    return child
                children.append((child, item))
        elif isinstance(value, list):
            children = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        else:
            continue
        pending.extend(reversed(children))
    return None


def _text_only(data: Any) -> Any:
    where = _lone_surrogate(data) if isinstance(data, dict) else None
    if where is not None:
        raise _FieldError(where, "holds a lone UTF-16 surrogate (such as \\ud800), "
                          "which is not text")
    return data


def _stop_list(value: str | list[str] | None) -> list[str] | None:
    if value is None:
        return None
    stops = [value] if isinstance(value, str) else value
    if len(stops) > MAX_STOP_STRINGS:
        raise ValueError(f"at most {MAX_STOP_STRINGS} stop sequences, got {len(stops)}")
    if any(not s for s in stops):
        raise ValueError("stop sequences must be non-empty")
    return stops


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
    # In OpenAI's own replies, which clients send back as they came: accepted when null (as
    # there, nothing was said), refused otherwise (the template has no place for them).
    refusal: None = None
    audio: None = None
    function_call: None = None
    annotations: None = None

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


class JsonSchemaFormat(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    """`text`; `json_object` (any JSON object); `json_schema` (JSON valid under its schema,
    enforced by constrained decoding)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type 'json_schema', and only then")
        return self

    @property
    def reply_schema(self) -> dict[str, Any] | None:
        """The schema the reply must follow (None: any text)."""
        if self.type == "json_object":
            return {"type": "object"}
        if self.type == "json_schema":
            return self.json_schema.schema_ or {}
        return None


class ChatCompletionRequest(_Strict):
    """POST /v1/chat/completions. Sampling defaults are OpenAI's (temperature 1, top_p 1)."""

    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_TOP_K)  # an extension, as in vLLM
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    # null is taken as the default (clients send explicit nulls).
    n: int = Field(1, ge=1)
    seed: int | None = Field(None, ge=-_INT64, lt=_INT64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: ResponseFormat | None = None
    parallel_tool_calls: bool | None = None
    modalities: list[str] | None = None
    # Accepted, and change nothing here: an end user's id, tags for stored completions.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    # Extensions, as in vLLM: the prompt's and each choice's token ids in the response; decoding
    # on past the model's stop tokens (fixed-length outputs, for load tests).
    return_token_ids: bool = False
    ignore_eos: bool = False

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        return _text_only(data)

    @field_validator("n", "stream", "logprobs", "return_token_ids", "ignore_eos", mode="wrap")
    @classmethod
    def _null_is_default(cls, value: Any, handler: Any, info: Any) -> Any:
        if value is None:
            return cls.model_fields[info.field_name].default
        return handler(value)

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> list[str] | None:
        return _stop_list(value)

    @field_validator(*_NO_OP_ONLY)
    @classmethod
    def _no_op_only(cls, value: Any, info: ValidationInfo) -> Any:
        accepted, why = _NO_OP_ONLY[info.field_name]
        if value not in accepted:
            raise ValueError(f"{json.dumps(value)} is not supported ({why})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and self.top_logprobs > 0 and not self.logprobs:
            raise _FieldError("top_logprobs", "top_logprobs needs logprobs=true")
        if self.stream_options is not None and not self.stream:
            raise _FieldError("stream_options", "stream_options needs stream=true")
        forced = isinstance(self.tool_choice, NamedToolChoice) or self.tool_choice == "required"
        if forced and self.json_schema is not None:
            raise _FieldError("response_format", "a JSON response_format and a forced "
                              "tool_choice cannot both hold: the reply is a call or JSON")
        if forced:
            names = {t.function.name for t in self.tools or []}
            if not names:
                raise _FieldError("tool_choice", "tool_choice names a tool but no tools are given")
            if (isinstance(self.tool_choice, NamedToolChoice)
                    and self.tool_choice.function.name not in names):
                raise _FieldError("tool_choice", f"tool_choice names "
                                  f"{self.tool_choice.function.name!r}, which is not in tools")
        return self

    @property
    def json_schema(self) -> dict[str, Any] | None:
        """The schema a JSON response_format asks the reply to follow, else None."""
        return None if self.response_format is None else self.response_format.reply_schema

    @property
    def completion_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens


class _FieldError(ValueError):
    """A cross-field check failing on a named field (reported as that field, not the body)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class CompletionRequest(_Strict):
    """POST /v1/completions (OpenAI's legacy text completions): one prompt, as text or token
    ids, continued as it is (no chat template). OpenAI's defaults: max_tokens 16, temperature 1.
    `logprobs` k in [0, 5] returns each token's logprob and its top k alternatives."""

    model: str
    prompt: str | list[int] = Field(min_length=1)
    max_tokens: int | None = Field(16, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=MAX_TOP_K)
    n: int = Field(1, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-_INT64, lt=_INT64)
    logprobs: int | None = Field(None, ge=0, le=5)
    # Accepted only with the values that ask for nothing more (others are refused, not ignored).
    stream: Literal[False] = False
    echo: Literal[False] = False
    best_of: Literal[1] | None = None
    suffix: None = None
    presence_penalty: Literal[0] | None = None
    frequency_penalty: Literal[0] | None = None
    user: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, data: Any) -> Any:
        return _text_only(data)

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> list[str] | None:
        return _stop_list(value)

    @field_validator("n", mode="wrap")
    @classmethod
    def _null_is_default(cls, value: Any, handler: Any) -> Any:
        return 1 if value is None else handler(value)

    @field_validator("prompt")
    @classmethod
    def _token_ids(cls, value: str | list[int]) -> str | list[int]:
        if isinstance(value, list) and any(t < 0 for t in value):
            raise ValueError("token ids must be >= 0")
        return value
