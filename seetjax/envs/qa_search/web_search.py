"""BFCL v4 `web_search` as offline QA search tasks: its questions, and a corpus built from its hops.

`bfcl_eval` ships 100 multi-hop questions (`BFCL_v4_web_search.json`: the user question) with
their answers (`possible_answer/BFCL_v4_web_search.json`: `ground_truth`, the answer and its
aliases; `source`, one record per hop with its `subquestion`, `answer` and source URL). Nothing is
copied here: the files are read from the installed package.

The corpus has one passage per hop, "{subquestion}: {answer}.", titled after its source URL's page
(the last path segment, or a search URL's query), id `web_search/{entry}/hop{i}`, the URL as
provenance; the hops of all 100 questions are each other's distractors, and `distractors`
passages of the synthetic world (`seetjax.envs.qa_search.world`, its train split) add unrelated
text. BFCL's data is not always consistent: in 22 entries the last hop's answer is not one of the
answer's aliases (web_search_0's last hop says Zhong Shanshan, its answer Zhang Yiming), and
web_search_87 says 4 hops but lists 5; hops are taken as listed.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from seetjax.envs.qa_search.corpus import Hop, Passage, QATask, read_jsonl_records
from seetjax.envs.qa_search.world import World, WorldConfig
from seetjax.retrieval.corpus import CorpusError

log = logging.getLogger(__name__)
QUESTIONS_FILE = "BFCL_v4_web_search.json"
ANSWERS_FILE = "possible_answer/BFCL_v4_web_search.json"


@dataclass(frozen=True)
class WebSearchData:
    """The tasks, the corpus, and every malformed line or entry skipped while reading them."""

    tasks: tuple[QATask, ...]
    passages: tuple[Passage, ...]
    errors: tuple[CorpusError, ...]


def bfcl_data_dir() -> Path:
    from seetjax.envs.bfcl.data import data_dir

    return data_dir()


def load_web_search(distractors: int = 200, seed: int = 0,
                    data_dir: str | os.PathLike | None = None) -> WebSearchData:
    """The web_search tasks and corpus (see the module docstring); `data_dir` defaults to
    bfcl_eval's data directory."""
    root = Path(data_dir) if data_dir is not None else bfcl_data_dir()
    questions, errors = read_jsonl_records(root / QUESTIONS_FILE)
    answers, answer_errors = read_jsonl_records(root / ANSWERS_FILE)
    errors += answer_errors
    by_id = {}
    for record in answers:
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            by_id[record["id"]] = record
        else:
            errors.append(CorpusError(f"{root / ANSWERS_FILE}: an answer record without an id: "
                                      f"{str(record)[:80]}"))
            log.warning("skipped web_search answer: %s", errors[-1])
    tasks, passages = [], []
    for record in questions:
        try:
            task, hop_passages = _entry(record, by_id)
        except (KeyError, TypeError, ValueError) as e:
            entry = record.get("id", "?") if isinstance(record, dict) else "?"
            errors.append(CorpusError(f"{root / QUESTIONS_FILE}: entry {entry}: {e!r}"))
            log.warning("skipped web_search entry: %s", errors[-1])
            continue
        tasks.append(task)
        passages.extend(hop_passages)
    if distractors:
        world = World(WorldConfig.sized(distractors, seed=seed))
        passages.extend(itertools.islice(world.passages(("train",)), distractors))
    return WebSearchData(tuple(tasks), tuple(passages), tuple(errors))


def _entry(record: Any, answers: dict[str, Any]) -> tuple[QATask, list[Passage]]:
    entry_id = record["id"]
    question = record["question"][0][-1]["content"]
    answer = answers[entry_id]
    aliases = tuple(str(a) for a in answer["ground_truth"])
    passages, hops = [], []
    for i, hop in enumerate(answer["source"]):
        sub, sub_answer, url = str(hop["subquestion"]), str(hop["answer"]), str(hop["source"])
        passage = Passage(f"web_search/{entry_id}/hop{i}", page_title(url),
                          f"{sub.strip().rstrip('?.').strip()}: {sub_answer}.", url)
        passages.append(passage)
        hops.append(Hop(sub, sub_answer, (passage.id,)))
    if not hops:
        raise ValueError("no hops")
    return QATask(entry_id, str(question), aliases, tuple(hops), split="web_search"), passages


def page_title(url: str) -> str:
    """A readable title for a source URL: its last path segment with `_`/`-` as spaces (a search
    URL's `q` query instead), else its host."""
    parsed = urlparse(url)
    query = parse_qs(parsed.query).get("q")
    segment = next((s for s in reversed(parsed.path.split("/")) if s), "")
    if query and segment in ("", "search"):
        return query[0]
    title = unquote(segment).replace("_", " ").replace("-", " ").strip()
    return title or parsed.netloc
