"""The QA search environment's data: passages, multi-hop questions, and JSONL files of them.

A `Passage` is one encyclopedia-style document (id, title, text, and where it comes from). A
`QATask` is a question with its answer and aliases and, per hop, the sub-question, its answer and
the ids of the passages that support it. Corpus files are JSONL, one passage per line; a
malformed line is skipped, logged with its file and line, and counted (`read_passages`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from seetjax.retrieval.corpus import CorpusError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Passage:
    """One document of the search corpus; `source` is its provenance (a URL, a generator name)."""

    id: str
    title: str
    text: str
    source: str = ""


@dataclass(frozen=True)
class Hop:
    """One step of a multi-hop question: its sub-question, the sub-answer, and the ids of the
    passages that state it."""

    question: str
    answer: str
    passage_ids: tuple[str, ...]


@dataclass(frozen=True)
class QATask:
    """A question; `answers[0]` is the canonical answer, the rest its aliases."""

    id: str
    question: str
    answers: tuple[str, ...]
    hops: tuple[Hop, ...]
    split: str = ""

    def __post_init__(self):
        if not self.answers:
            raise ValueError(f"{self.id}: a task needs at least one answer")

    @property
    def num_hops(self) -> int:
        return len(self.hops)

    @property
    def gold_passage_ids(self) -> frozenset[str]:
        """Every passage some hop needs."""
        return frozenset(p for hop in self.hops for p in hop.passage_ids)


def passage_from_record(record: Any) -> Passage:
    """A `Passage` from a JSON object with string `id`, `title`, `text` (and optional `source`);
    ValueError saying which field is wrong otherwise."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a passage is a JSON object, got {type(record).__name__}")
    for field in ("id", "title", "text"):
        if not isinstance(record.get(field), str) or not record[field].strip():
            raise ValueError(f"{field!r} must be a non-empty string")
    if not isinstance(record.get("source", ""), str):
        raise ValueError("'source' must be a string")
    return Passage(record["id"], record["title"], record["text"], record.get("source", ""))


def read_jsonl_records(path: str | os.PathLike) -> tuple[list[Any], list[CorpusError]]:
    """The JSON values of a JSONL file's lines (blank lines skipped) and one CorpusError per line
    that is not JSON, logged with file and line and skipped."""
    return _read_lines(path, lambda record: record)


def read_passages(path: str | os.PathLike) -> tuple[list[Passage], list[CorpusError]]:
    """The passages of a JSONL corpus file, and one CorpusError (file:line: why) per malformed
    line: each is logged and skipped, the rest is read. A repeated id keeps its first passage
    and counts as an error too (two documents under one id would make retrieval metrics lie)."""
    passages: dict[str, Passage] = {}

    def read(record: Any) -> Passage:
        passage = passage_from_record(record)
        if passage.id in passages:
            raise ValueError(f"duplicate passage id {passage.id!r}")
        passages[passage.id] = passage
        return passage

    _, errors = _read_lines(path, read)
    return list(passages.values()), errors


def write_passages(path: str | os.PathLike, passages: Iterable[Passage]) -> int:
    """Writes `passages` as JSONL (streamed: any number); returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for passage in passages:
            f.write(json.dumps(asdict(passage), ensure_ascii=False) + "\n")
            count += 1
    return count


def _read_lines(path: str | os.PathLike, read: Callable[[Any], Any]
                ) -> tuple[list[Any], list[CorpusError]]:
    path = Path(path)
    out, errors = [], []
    for number, line in _numbered_lines(path):
        try:
            out.append(read(json.loads(line)))
        except ValueError as e:  # JSONDecodeError is a ValueError
            errors.append(CorpusError(f"{path}:{number}: {e}"))
            log.warning("skipped malformed line: %s", errors[-1])
    if errors:
        log.warning("%s: %d malformed line(s) skipped", path, len(errors))
    return out, errors


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                yield number, line
