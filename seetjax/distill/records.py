"""The distilled record: structured turns, the tools offered, and metadata; one row of a shard.

The same model gives the JSONL line (`model_dump`) and the Parquet row (`ARROW_SCHEMA`, derived
from the model), so both formats hold identical rows. Free-form JSON (tool arguments, tool
parameter schemas, sampling parameters) is kept as JSON text, as OpenAI's API keeps arguments,
so every row has the same columns.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from seetjax.serving.client import chat_messages

Kind = Literal["system", "user", "rationale", "tool_call", "tool_result", "final_answer"]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallRecord(_Row):
    id: str
    name: str
    arguments: str  # JSON text


class Turn(_Row):
    """One message. `kind`: system, user, tool_call (an assistant message with calls; its
    `content` is the rationale), tool_result, final_answer (an assistant message without calls).
    `turn`: the user turn it belongs to."""

    role: Literal["system", "user", "assistant", "tool"]
    kind: Kind
    content: str
    turn: int
    tool_calls: list[CallRecord] = Field(default_factory=list)
    tool_call_id: str | None = None


class ToolDoc(_Row):
    name: str
    description: str
    parameters: str  # JSON schema text


class TeacherInfo(_Row):
    endpoint: str
    provider: str
    model: str
    sampling: str  # JSON text of the sampling parameters sent


class ReviewRound(_Row):
    """One round: the teacher's attempt, its validation, and the reviewer's verdict (if any)."""

    round: int
    teacher_endpoint: str
    validation_passed: bool
    validation_feedback: list[str] = Field(default_factory=list)
    reviewer_endpoint: str | None = None
    reviewer_model: str | None = None
    score: float | None = None
    needs_revision: bool | None = None
    feedback: str = ""
    chinese_summary: str = ""


class Generation(_Row):
    run_name: str
    seed: int
    teacher: TeacherInfo
    review_rounds: list[ReviewRound]
    fallbacks: list[str] = Field(default_factory=list)  # endpoints that failed before


class LanguageInfo(_Row):
    require_chinese_summary: bool
    english_share: float
    chinese_summary_present: bool


class Metadata(_Row):
    scenario_id: str
    scenario_type: str  # the family
    difficulty: str
    task_id: str
    score: float  # the reviewer's score if reviewed, else the validation score
    validation_score: float
    reflection_passes: int
    language_policy: LanguageInfo
    validation_feedback: list[str]
    prompt_tokens: int
    completion_tokens: int
    generation: Generation


class Record(_Row):
    """A distilled trace as written to the shards."""

    id: str
    turns: list[Turn]
    tools: list[ToolDoc]
    metadata: Metadata

    def row(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Outcome(_Row):
    """What became of one scenario: accepted, rejected (with the reason: a validator's name,
    `review`, `review_unparsed`, `teacher_failed`, ...), or a duplicate of `duplicate_of`."""

    scenario_id: str
    status: Literal["accepted", "rejected", "duplicate"]
    reason: str = ""
    detail: str = ""
    duplicate_of: str = ""
    record: Record | None = None


def build_turns(system: str, history: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """Structured turns of an episode: the system prompt, then the environment's history (calls
    read from the assistant text into `tool_calls`, each result answering its call by id, as
    `seetjax.serving.client.chat_messages` gives them to an endpoint)."""
    turns = [Turn(role="system", kind="system", content=system, turn=0)]
    turn, previous = -1, None
    for m in chat_messages(history, native=True, call_format="hermes"):
        role = m["role"]
        if role == "system":
            continue
        if role == "user" and previous != "user":
            turn += 1
        previous = role
        if role == "user":
            turns.append(Turn(role="user", kind="user", content=m["content"], turn=max(turn, 0)))
        elif role == "tool":
            turns.append(Turn(role="tool", kind="tool_result", content=m["content"], turn=turn,
                              tool_call_id=m.get("tool_call_id")))
        else:
            calls = [CallRecord(id=c["id"], name=c["function"]["name"],
                                arguments=c["function"]["arguments"])
                     for c in m.get("tool_calls") or []]
            turns.append(Turn(role="assistant", kind="tool_call" if calls else "final_answer",
                              content=m.get("content") or "", turn=turn, tool_calls=calls))
    return turns


def tool_docs(tools: Sequence[Mapping[str, Any]]) -> list[ToolDoc]:
    """OpenAI tool entries as rows (parameters as JSON text)."""
    return [ToolDoc(name=t["function"]["name"], description=t["function"].get("description", ""),
                    parameters=json.dumps(t["function"].get("parameters", {}), sort_keys=True,
                                          ensure_ascii=False))
            for t in tools]


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of a field annotation of these models."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return _arrow_type(inner)[0], True
    if origin is list:
        return pa.list_(pa.field("item", *_arrow_type(args[0]))), False
    if origin is Literal or annotation is str:
        return pa.string(), False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return pa.struct(_arrow_fields(annotation)), False
    return {int: pa.int64(), float: pa.float64(), bool: pa.bool_()}[annotation], False


def _arrow_fields(model: type[BaseModel]) -> list[pa.Field]:
    hints = typing.get_type_hints(model)
    return [pa.field(name, *_arrow_type(hints[name])) for name in model.model_fields]


ARROW_SCHEMA = pa.schema(_arrow_fields(Record))
