"""`launch/evaluate.py` with BFCL single-turn categories beside multi-turn ones, on the embedded
default: per-entry verdicts, accuracy per category and the leaderboard's aggregates."""

import json
import subprocess
import sys
from pathlib import Path

from tests.launch.flagcheck import assert_flag_errors

ROOT = Path(__file__).resolve().parents[2]


def test_single_turn_categories_are_reported_beside_multi_turn(embedded_dir, tmp_path):
    stem = tmp_path / "eval"
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--out={stem}", "--per_category=2",
         "--categories=base,simple,live_multiple,irrelevance,live_relevance", "--splits=test",
         "--decoding=lenient,official", "--max_reply_tokens=8", "--max_episode_tokens=2048"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    multi = json.loads(stem.with_suffix(".json").read_text())
    assert [r["split"] for r in multi] == ["test", "test (official)"]
    assert set(multi[0]["accuracy"]) == {"base"}
    single = json.loads((tmp_path / "eval.single_turn.json").read_text())
    assert [r["label"] for r in single] == ["single-turn", "single-turn (official)"]
    for report in single:
        assert report["total"] == {"simple": 2, "live_multiple": 2, "irrelevance": 2,
                                   "live_relevance": 2}
        assert set(report["aggregates"]) == {"non_live_ast", "live_ast", "irrelevance", "relevance"}
        assert [e["id"] for e in report["entries"]][:2] == ["simple_python_0", "simple_python_1"]
    table = stem.with_suffix(".md").read_text()
    assert "| test |" in table and "| single-turn | " in table and "| single-turn (official) |" in table
    assert "| decoding | non-live AST | live AST | irrelevance | relevance | multi-turn test |" in table


def test_held_out_entries_only_exclude_every_sft_entry(embedded_dir, tmp_path):
    from seetjax.data.single_turn_dialogs import held_out_ids
    stem = tmp_path / "eval"
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--out={stem}", "--per_category=3",
         "--categories=simple,irrelevance", "--single_turn_entries=held_out",
         "--max_reply_tokens=8"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (report,) = json.loads((tmp_path / "eval.single_turn.json").read_text())
    assert report["total"] == {"simple": 3, "irrelevance": 3}
    ids = [e["id"] for e in report["entries"]]
    assert set(ids) <= held_out_ids()


BAD_FLAGS = [
    (["--categories=simple,nope,simple_java"], "unknown nope, simple_java"),
    (["--single_turn_batch_size=0"], "--single_turn_batch_size")]


def test_bad_single_turn_flags_fail_naming_the_problem():
    assert_flag_errors("launch/evaluate.py", BAD_FLAGS)
