"""BFCL v4 web_search as QA tasks with a corpus of its hops."""

import json

from seetjax.envs.qa_search.web_search import (
    ANSWERS_FILE,
    QUESTIONS_FILE,
    bfcl_data_dir,
    load_web_search,
    page_title,
)


def test_tasks_and_corpus():
    data = load_web_search(distractors=50)
    assert len(data.tasks) == 100 and data.errors == ()
    assert {t.num_hops for t in data.tasks} == {2, 3, 4, 5}
    passages = {p.id: p for p in data.passages}
    assert len(passages) == len(data.passages) == sum(t.num_hops for t in data.tasks) + 50
    task = next(t for t in data.tasks if t.id == "web_search_2")
    assert task.answers == ("Dong-Sup Yoon", "Yoo Dong-Sup", "Yoon Dong-Sup")
    assert [h.answer for h in task.hops] == ["Han Kang", "Yonsei University", "Dong-Sup Yoon"]
    hop = passages[task.hops[1].passage_ids[0]]
    assert hop.title == "Han Kang" and hop.source == "https://en.wikipedia.org/wiki/Han_Kang"
    assert hop.text == "Where did Han Kang recieved her alma meter: Yonsei University."
    for t in data.tasks:
        assert t.split == "web_search" and t.question.strip()
        for h in t.hops:
            assert h.answer in passages[h.passage_ids[0]].text


def test_page_titles():
    assert page_title("https://en.wikipedia.org/wiki/Usher_(musician)#x") == "Usher (musician)"
    assert page_title("https://www.google.com/search?q=usher+birthplace") == "usher birthplace"
    assert page_title("https://example.org/") == "example.org"


def test_malformed_lines_and_entries_are_skipped_and_counted(tmp_path, caplog):
    (tmp_path / "possible_answer").mkdir()
    source = bfcl_data_dir()
    questions = (source / QUESTIONS_FILE).read_text().splitlines()[:4]
    answers = (source / ANSWERS_FILE).read_text().splitlines()[:4]
    broken = json.loads(questions[2])
    del broken["question"]
    questions[2] = json.dumps(broken)
    (tmp_path / QUESTIONS_FILE).write_text("\n".join([*questions, "{oops"]) + "\n")
    (tmp_path / ANSWERS_FILE).write_text("\n".join(["[]", *answers]) + "\n")
    data = load_web_search(distractors=0, data_dir=tmp_path)
    assert [t.id for t in data.tasks] == ["web_search_0", "web_search_1", "web_search_3"]
    assert len(data.errors) == 3
    messages = [str(e) for e in data.errors]
    assert any(f"{tmp_path / QUESTIONS_FILE}:5" in m for m in messages)
    assert any("web_search_2" in m for m in messages)
    assert any(str(tmp_path / ANSWERS_FILE) in m for m in messages)
    assert "web_search_2" in caplog.text
