"""OpenAI chat-completions schema, the responses: typed pydantic models of what the server sends
(a field not declared here is a bug, so none is allowed). The requests are in `protocol.py`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


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


class CompletionLogprobs(_Out):
    """OpenAI's legacy logprobs: per token its text, logprob, top alternatives and offset."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(_Out):
    index: int
    text: str
    finish_reason: Literal["stop", "length"]
    logprobs: CompletionLogprobs | None = None


class Completion(_Out):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
