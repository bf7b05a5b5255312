"""Agent dialogs: the data model of supervised agent training, stored as JSONL (one dialog a line).

A dialog is what a chat template renders: OpenAI-style messages plus the tool entries the template
shows natively, an id and free metadata.

    {"id": "bfcl/base_3",
     "messages": [{"role": "system", "content": "..."},
                  {"role": "user", "content": "Move the report to temp."},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function",
                                   "function": {"name": "mv", "arguments": {"source": "r.pdf"}}}]},
                  {"role": "tool", "name": "mv", "content": "{\\"result\\": \\"moved\\"}"},
                  {"role": "assistant", "content": "Done."}],
     "tools": [...],  # OpenAI tool entries for the template's tools section; [] when the docs
                      # are written into the system prompt instead
     "metadata": {"source": "bfcl", "num_tools_offered": 27, "loss": 1.9, "task_type": ...}}

Roles: system, user, assistant (text `content` and/or `tool_calls`, a call being
`{"function": {"name", "arguments"}}` or flat `{"name", "arguments"}`, arguments an object or its
JSON text), tool (a result; it must follow an assistant message with calls, or another result).

Metadata the pipeline reads (all optional): `loss` (a precomputed per-token loss, respected by
coreset selection), `task_type` (overrides the derived one), `num_tools_offered` (the number of
tools offered when their docs are not in `tools`, e.g. written into the system prompt).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from seetjax.tools.calls import ParseError, parse_tool_calls

ROLES = ("system", "user", "assistant", "tool")
TASK_TYPES = ("tool_selection", "multi_step_planning", "timing_decision", "tool_retrieval")
# A dialog offering at least this many tools is a retrieval task (see `derive_task_type`).
MANY_TOOLS = 24
# The window of the moving-average type-token ratio (Covington & McFall 2010).
MATTR_WINDOW = 50


@dataclasses.dataclass
class Dialog:
    """One agent dialog (see the module docstring); validated on construction."""

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        validate(self)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: Any) -> Dialog:
        if not isinstance(record, dict):
            raise ValueError(f"a dialog must be a JSON object, not {type(record).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = set(record) - fields, {"id", "messages"} - set(record)
        if unknown or missing:
            raise ValueError(f"dialog {record.get('id')!r}: unknown fields {sorted(unknown)}, "
                             f"missing fields {sorted(missing)}")
        return cls(**record)

    @property
    def task_type(self) -> str:
        """The metadata's `task_type` if set, else the one derived from the structure."""
        return self.metadata.get("task_type") or derive_task_type(self)


def tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls of a message, each as `{"name", "arguments"}` (arguments as given)."""
    return [call.get("function", call) for call in message.get("tool_calls") or []]


def num_calls(message: dict[str, Any]) -> int:
    """How many calls an assistant message makes: its `tool_calls`, else the calls written in its
    text (a python list, `<tool_call>` blocks or JSON; parsed, never evaluated; 0 if unreadable)."""
    if message["role"] != "assistant":
        return 0
    if message.get("tool_calls"):
        return len(message["tool_calls"])
    parsed = parse_tool_calls(message.get("content") or "", "auto")
    return 0 if isinstance(parsed, ParseError) else len(parsed)


def validate(dialog: Dialog) -> None:
    """Raises ValueError naming the dialog, the message and the field at fault."""
    where = f"dialog {dialog.id!r}"
    if not isinstance(dialog.id, str) or not dialog.id:
        raise ValueError(f"{where}: field 'id' must be a non-empty string")
    for name, kind in (("messages", list), ("tools", list), ("metadata", dict)):
        if not isinstance(getattr(dialog, name), kind):
            raise ValueError(f"{where}: field {name!r} must be a {kind.__name__}")
    if not dialog.messages:
        raise ValueError(f"{where}: field 'messages' is empty")
    for i, m in enumerate(dialog.messages):
        _validate_message(m, dialog.messages[i - 1] if i else None, f"{where}, message {i}")
    if not any(m["role"] == "assistant" for m in dialog.messages):
        raise ValueError(f"{where}: no assistant message to learn from")
    task_type = dialog.metadata.get("task_type")
    if task_type is not None and task_type not in TASK_TYPES:
        raise ValueError(f"{where}: metadata.task_type {task_type!r} not in {TASK_TYPES}")
    loss = dialog.metadata.get("loss")
    if loss is not None and (isinstance(loss, bool) or not isinstance(loss, (int, float))):
        raise ValueError(f"{where}: metadata.loss must be a number, not {loss!r}")


def _validate_message(m: Any, previous: dict[str, Any] | None, where: str) -> None:
    if not isinstance(m, dict):
        raise ValueError(f"{where}: a message must be an object")
    role = m.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}: field 'role' is {role!r}, not one of {ROLES}")
    content = m.get("content")
    if not isinstance(content, str) and not (role == "assistant" and content is None):
        raise ValueError(f"{where}: field 'content' must be a string")
    if "tool_calls" in m and role != "assistant":
        raise ValueError(f"{where}: field 'tool_calls' on a {role} message")
    if not isinstance(m.get("tool_calls") or [], list):
        raise ValueError(f"{where}: field 'tool_calls' must be a list")
    for k, call in enumerate(m.get("tool_calls") or []):
        function = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"{where}, tool call {k}: field 'name' must be a string")
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}, tool call {k}: field 'arguments' is not JSON: {e}") from e
        if not isinstance(arguments, dict):
            raise ValueError(f"{where}, tool call {k}: field 'arguments' must be an object")
    if role == "assistant" and not content and not m.get("tool_calls"):
        raise ValueError(f"{where}: an assistant message needs 'content' or 'tool_calls'")
    # An assistant message may call tools in its text (python-list or hermes formats), so any
    # assistant message may be answered by results.
    if role == "tool" and (previous is None or previous["role"] not in ("assistant", "tool")):
        raise ValueError(f"{where}: a tool result must follow an assistant message or a result")


def user_turns(dialog: Dialog) -> list[list[dict[str, Any]]]:
    """The assistant messages answering each user turn, in order (a turn starts at a user
    message that follows a non-user message; consecutive user messages are one turn)."""
    turns: list[list[dict[str, Any]]] = []
    previous = None
    for m in dialog.messages:
        if m["role"] == "user" and previous != "user":
            turns.append([])
        elif m["role"] == "assistant" and turns:
            turns[-1].append(m)
        previous = m["role"]
    return turns


def tools_offered(dialog: Dialog) -> int:
    """Tools offered: the native `tools`, else metadata `num_tools_offered` (docs in the prompt)."""
    return len(dialog.tools) or int(dialog.metadata.get("num_tools_offered", 0))


def derive_task_type(dialog: Dialog) -> str:
    """Task type from the dialog's structure, the first rule that applies:

    - timing_decision: tools are offered and some user turn is answered without any call (the
      skill is deciding when not to act: a missing tool or parameter, or nothing to do);
    - multi_step_planning: some user turn takes two or more calls (`num_calls`);
    - tool_retrieval: at least MANY_TOOLS tools are offered (finding the one to call among many);
    - tool_selection: otherwise (one call per turn from a short list: pick tool and arguments).
    """
    calls_per_turn = [sum(num_calls(m) for m in turn) for turn in user_turns(dialog)]
    offered = tools_offered(dialog)
    if offered and any(n == 0 for n in calls_per_turn):
        return "timing_decision"
    if any(n >= 2 for n in calls_per_turn):
        return "multi_step_planning"
    if offered >= MANY_TOOLS:
        return "tool_retrieval"
    return "tool_selection"


def read_jsonl(path: str | os.PathLike) -> list[Dialog]:
    """Reads dialogs; a malformed line fails with its path and line number. Ids must be unique."""
    dialogs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                dialogs.append(Dialog.from_json(json.loads(line)))
            except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
                raise ValueError(f"{os.fspath(path)}:{number}: {e}") from e
    check_unique_ids(dialogs)
    return dialogs


def write_jsonl(dialogs: Iterable[Dialog], path: str | os.PathLike) -> int:
    """Writes one dialog per line; returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for dialog in dialogs:
            f.write(json.dumps(dialog.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count


def check_unique_ids(dialogs: Sequence[Dialog]) -> None:
    seen: set[str] = set()
    for dialog in dialogs:
        if dialog.id in seen:
            raise ValueError(f"dialog id {dialog.id!r} appears twice")
        seen.add(dialog.id)


def conversation_text(dialog: Dialog) -> str:
    """What the user asks and what the assistant says and calls (names and arguments); the system
    prompt and tool outputs, written by the environment, are left out."""
    parts: list[str] = []
    for m in dialog.messages:
        if m["role"] in ("user", "assistant"):
            parts.append(m.get("content") or "")
        for function in tool_calls(m):
            arguments = function.get("arguments", {})
            parts.append(function["name"])
            parts.append(arguments if isinstance(arguments, str) else json.dumps(arguments))
    return "\n".join(p for p in parts if p)


def lexical_diversity(dialog: Dialog, window: int = MATTR_WINDOW) -> float:
    """Moving-average type-token ratio (MATTR, Covington & McFall 2010) of the lower-cased words
    of `conversation_text`: the mean over every `window`-word span of distinct words / words
    (the plain ratio when shorter). Unlike the plain ratio it does not fall with length."""
    words = conversation_text(dialog).lower().split()
    if len(words) <= window:
        return len(set(words)) / len(words) if words else 0.0
    counts: dict[str, int] = {}
    for w in words[:window]:
        counts[w] = counts.get(w, 0) + 1
    total = len(counts)
    for i in range(window, len(words)):  # slide: one word in, one out
        counts[words[i]] = counts.get(words[i], 0) + 1
        gone = words[i - window]
        counts[gone] -= 1
        if not counts[gone]:
            del counts[gone]
        total += len(counts)
    return total / ((len(words) - window + 1) * window)


def type_counts(dialogs: Iterable[Dialog]) -> dict[str, int]:
    """How many dialogs of each task type."""
    counts = dict.fromkeys(TASK_TYPES, 0)
    for d in dialogs:
        counts[d.task_type] += 1
    return counts


def listing(reasons: dict[str, str], limit: int = 10) -> str:
    """The first `limit` (id: reason) lines, and how many more there are."""
    lines = [f"\n  {i}: {why}" for i, why in sorted(reasons.items())[:limit]]
    more = len(reasons) - limit
    return "".join(lines) + (f"\n  ... and {more} more" if more > 0 else "")
