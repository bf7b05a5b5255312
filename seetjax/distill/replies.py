"""A chat-completion reply as the pipeline reads it: validated from the raw body before any of
it is used.

A 200 from an endpoint may hold anything: bytes that are not UTF-8, text that is not JSON, JSON
without `choices`, a choice without its `message`, content that is not text, a tool call without
`function` or `name`. `parse_reply` takes only what the chat-completions schema allows (the first
choice's message: content a string or null, tool calls each naming a function with string
arguments; usage counts, when sent, non-negative integers; unknown fields ignored) and raises
`MalformedReply` naming the field at fault otherwise, which the endpoint retries as it does a
5xx. What a well-formed reply says (arguments that are not JSON, an empty answer) is the model's
output: the episode reads it as such and the validators name what is wrong.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from seetjax.distill.config import field_path


class MalformedReply(Exception):
    """A 200 whose body is not a chat completion (see the module docstring): retried."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class FunctionCall(_Model):
    name: str = Field(min_length=1)
    arguments: str  # JSON text as the model wrote it, not necessarily valid


class ToolCall(_Model):
    id: str = ""
    function: FunctionCall


class Message(_Model):
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _none(cls, value: Any) -> Any:
        return () if value is None else value


class _Choice(_Model):
    message: Message
    finish_reason: str | None = None


class _Usage(_Model):
    prompt_tokens: int | None = Field(None, ge=0)
    completion_tokens: int | None = Field(None, ge=0)


class Completion(_Model):
    """The parts of a chat completion the pipeline reads."""

    choices: tuple[_Choice, ...] = Field(min_length=1)
    usage: _Usage | None = None

    @property
    def message(self) -> Message:
        return self.choices[0].message

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason

    @property
    def tokens(self) -> tuple[int, int]:
        """(prompt, completion) tokens as the endpoint counted them; 0 where it did not say."""
        usage = self.usage or _Usage()
        return usage.prompt_tokens or 0, usage.completion_tokens or 0


def parse_reply(body: bytes) -> Completion:
    """The completion in a response body; raises MalformedReply naming what is wrong."""
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise MalformedReply(f"the body is not UTF-8 ({e}): {body[:120]!r}") from None
    except json.JSONDecodeError as e:
        raise MalformedReply(f"the body is not JSON ({e}): {body[:120]!r}") from None
    try:
        return Completion.model_validate(data)
    except ValidationError as e:
        error = e.errors()[0]
        where = field_path(error["loc"]) or "the body"
        raise MalformedReply(f"{where}: {error['msg']} (got {str(error['input'])[:120]!r}; "
                             f"{e.error_count()} error(s))") from None
