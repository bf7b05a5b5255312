"""Tool documents: their identity, the text an encoder reads, and user-supplied corpus files.

A tool document is a function doc in BFCL's JSON form (`name`, `description`, `parameters` with
`properties`). Its id is the name plus a hash of the whole doc, so that two docs sharing a name
(BFCL reuses names across categories with different descriptions) stay apart, and the same doc
seen twice is one document.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ToolDoc:
    id: str
    name: str
    text: str  # what the encoder and BM25 read


class CorpusError(ValueError):
    """A malformed document: names its file and line."""


def doc_id(doc: Mapping[str, Any]) -> str:
    canonical = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return f"{doc['name']}#{hashlib.sha256(canonical.encode()).hexdigest()[:10]}"


def doc_text(doc: Mapping[str, Any]) -> str:
    """`name: description Parameters: p (type): description; ...`: the name with its separators
    as spaces too (`get_weather.by_city` -> `get weather by city`, which word-piece and BM25
    tokenizers split into words), then the description and each parameter."""
    name = doc["name"]
    words = name.replace("_", " ").replace(".", " ")
    params = []
    for pname, spec in (doc.get("parameters") or {}).get("properties", {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        params.append(f"{pname} ({spec.get('type', 'any')}): {spec.get('description', '')}".strip())
    text = f"{name} ({words}): {doc.get('description', '')}"
    return f"{text} Parameters: {'; '.join(params)}" if params else text


def validate_doc(doc: Any) -> None:
    """Raises ValueError saying what is wrong with a function doc."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"a function doc is a JSON object, got {type(doc).__name__}")
    if not isinstance(doc.get("name"), str) or not doc["name"].strip():
        raise ValueError("'name' must be a non-empty string")
    if not isinstance(doc.get("description", ""), str):
        raise ValueError("'description' must be a string")
    params = doc.get("parameters", {})
    if not isinstance(params, Mapping) or not isinstance(params.get("properties", {}), Mapping):
        raise ValueError("'parameters' must be an object whose 'properties' is an object")


def tool_doc(doc: Mapping[str, Any]) -> ToolDoc:
    validate_doc(doc)
    return ToolDoc(id=doc_id(doc), name=doc["name"], text=doc_text(doc))


def read_corpus(path: str | os.PathLike) -> tuple[list[ToolDoc], list[CorpusError]]:
    """The documents of a JSONL file (one function doc per line; blank lines skipped) and one
    CorpusError per malformed line, logged, its line skipped: the rest is still indexed."""
    path = Path(path)
    docs: dict[str, ToolDoc] = {}
    errors = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = tool_doc(json.loads(line))
            except ValueError as e:  # JSONDecodeError is a ValueError
                errors.append(CorpusError(f"{path}:{number}: {e}"))
                log.warning("%s", errors[-1])
                continue
            docs.setdefault(doc.id, doc)
    return list(docs.values()), errors
