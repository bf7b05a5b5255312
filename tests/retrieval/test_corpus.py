"""Tool documents: ids, text, and user corpus files with malformed lines."""

import json

import pytest

from seetjax.retrieval.corpus import doc_id, doc_text, read_corpus, tool_doc

WEATHER = {"name": "get_weather.by_city", "description": "Forecast for a city.",
           "parameters": {"type": "dict", "properties": {
               "city": {"type": "string", "description": "City name."}}, "required": ["city"]}}


def test_doc_text_spells_out_the_name_and_parameters():
    assert doc_text(WEATHER) == ("get_weather.by_city (get weather by city): Forecast for a city. "
                                 "Parameters: city (string): City name.")
    assert doc_text({"name": "ping"}) == "ping (ping): "


def test_doc_ids_separate_same_name_docs_and_merge_equal_ones():
    other = {**WEATHER, "description": "Another forecast."}
    assert doc_id(WEATHER) != doc_id(other)
    assert doc_id(WEATHER) == doc_id(json.loads(json.dumps(WEATHER)))
    assert doc_id(WEATHER).startswith("get_weather.by_city#")


@pytest.mark.parametrize("bad, message", [
    ([1, 2], "JSON object"), ({"description": "x"}, "'name'"),
    ({"name": "f", "description": 3}, "'description'"),
    ({"name": "f", "parameters": {"properties": []}}, "'parameters'")])
def test_invalid_docs_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        tool_doc(bad)


def test_malformed_lines_are_rejected_with_file_and_line_and_the_rest_indexed(tmp_path):
    path = tmp_path / "tools.jsonl"
    lines = [json.dumps(WEATHER), "{not json", "", json.dumps({"description": "no name"}),
             json.dumps({"name": "send_email", "description": "Send an email."}),
             json.dumps(WEATHER)]  # a duplicate: indexed once
    path.write_text("\n".join(lines) + "\n")
    docs, errors = read_corpus(path)
    assert [d.name for d in docs] == ["get_weather.by_city", "send_email"]
    assert [str(e).split(": ")[0] for e in errors] == [f"{path}:2", f"{path}:4"]
    assert "'name'" in str(errors[1])
