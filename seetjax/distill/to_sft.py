"""Distilled records into SFT dialogs (`seetjax.data.dialogs.Dialog`), closing the loop with
`seetjax/sft/run.py` (`data.source=jsonl`, `data.paths=<the JSONL written here>`).

Each record becomes one dialog: its system prompt, user turns, assistant messages with structured
`tool_calls` (ids kept, arguments as JSON text) and `tool` results answering them, and the tools
as native OpenAI entries, so the chat template renders them as the teacher saw them. The task
type is left to `derive_task_type` (from the structure, as for every other dialog).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from seetjax.data.dialogs import Dialog, write_jsonl
from seetjax.distill.records import Record
from seetjax.distill.writer import read_records


def to_dialog(record: Record) -> Dialog:
    names = {c.id: c.name for t in record.turns for c in t.tool_calls}
    messages: list[dict[str, Any]] = []
    for turn in record.turns:
        if turn.role == "assistant" and turn.tool_calls:
            messages.append({"role": "assistant", "content": turn.content,
                             "tool_calls": [{"id": c.id, "type": "function",
                                             "function": {"name": c.name,
                                                          "arguments": c.arguments}}
                                            for c in turn.tool_calls]})
        elif turn.role == "tool":
            messages.append({"role": "tool", "content": turn.content,
                             "tool_call_id": turn.tool_call_id,
                             "name": names.get(turn.tool_call_id or "", "")})
        else:
            messages.append({"role": turn.role, "content": turn.content})
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": json.loads(t.parameters)}}
             for t in record.tools]
    meta = record.metadata
    return Dialog(id=f"distill/{meta.generation.run_name}/{record.id}", messages=messages,
                  tools=tools,
                  metadata={"source": "distill", "scenario_id": meta.scenario_id,
                            "scenario_type": meta.scenario_type, "difficulty": meta.difficulty,
                            "score": meta.score,
                            "teacher": meta.generation.teacher.model})


def convert(records: Iterable[Record], path: str | os.PathLike, min_score: float = 0.0) -> int:
    """Writes the dialogs of records scoring at least `min_score` to a JSONL file; how many."""
    return write_jsonl((to_dialog(r) for r in records if r.metadata.score >= min_score), path)


def convert_output(url: str, path: str | os.PathLike, min_score: float = 0.0) -> int:
    """`convert` over every shard of a distillation output."""
    return convert(read_records(url), path, min_score)
