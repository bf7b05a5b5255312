"""Corpus files: malformed lines are skipped, counted and logged with file and line."""

import json
import logging

from seetjax.envs.qa_search.corpus import Passage, read_passages, write_passages


def test_round_trip(tmp_path, world):
    path = tmp_path / "corpus.jsonl"
    passages = list(world.passages(("train",)))
    assert write_passages(path, iter(passages)) == len(passages)
    assert read_passages(path) == (passages, [])


def test_malformed_lines_are_skipped_counted_and_logged(tmp_path, caplog):
    path = tmp_path / "corpus.jsonl"
    good = {"id": "a", "title": "A", "text": "alpha"}
    lines = [json.dumps(good), "{not json", "", json.dumps({"id": "b", "title": "B"}),
             json.dumps([1, 2]), json.dumps({**good, "text": "again"}),
             json.dumps({"id": "c", "title": "C", "text": "gamma", "source": 3}),
             json.dumps({"id": "d", "title": "D", "text": "delta", "source": "u"})]
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        passages, errors = read_passages(path)
    assert passages == [Passage("a", "A", "alpha"), Passage("d", "D", "delta", "u")]
    assert [str(e).split(": ")[0] for e in errors] == [f"{path}:{n}" for n in (2, 4, 5, 6, 7)]
    assert "'text' must be a non-empty string" in str(errors[1])
    assert "duplicate passage id 'a'" in str(errors[3])
    assert f"{path}:2" in caplog.text and "5 malformed line(s) skipped" in caplog.text
