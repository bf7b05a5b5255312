"""`launch/retrieval.py`: bad input named, a user corpus with a malformed line still indexed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def launch(*args, timeout=300):
    return subprocess.run([sys.executable, "launch/retrieval.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["train", "--batch_size=1"], "batch_size=1"), (["eval", "--depth=0"], "--depth=0")])
def test_bad_flags_are_named(args, message, tmp_path):
    out = launch(*args, f"--workdir={tmp_path}")
    assert out.returncode != 0 and message in out.stderr, out.stderr[-1000:]
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_search_names_bad_queries_and_indexes_the_rest_of_a_corpus(tiny_dir, tmp_path):
    corpus = tmp_path / "tools.jsonl"
    corpus.write_text("\n".join([
        json.dumps({"name": "get_weather", "description": "Weather forecast for a city."}),
        '{"name": "broken", ',
        json.dumps({"name": "send_email", "description": "Send an email."})]) + "\n")
    common = [f"--encoder={tiny_dir}", f"--corpus={corpus}", f"--workdir={tmp_path}"]
    out = launch("search", *common)
    assert out.returncode != 0 and "at least one --query" in out.stderr
    out = launch("search", "--query=   ", *common)
    assert out.returncode == 2 and "EmptyQueryError: query 0 is empty" in out.stderr
    out = launch("search", "--query=" + "weather " * 100, *common)
    assert out.returncode == 2 and "QueryTooLongError" in out.stderr  # the tiny model reads 64
    out = launch("search", "--query=weather", "--k=5", *common)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"rejected: {corpus}:2:" in out.stderr and "2 docs indexed, 1 lines rejected" in out.stdout
    assert out.stdout.count("get_weather#") + out.stdout.count("send_email#") == 2
