"""`launch/evaluate.py --tool_retrieval`: one evaluation per k, the sweep's table and figure."""

import json
import subprocess
import sys
from pathlib import Path

from tests.launch.flagcheck import assert_flag_errors

ROOT = Path(__file__).resolve().parents[2]


def test_retrieval_sweep_reports_each_k(embedded_dir, tmp_path):
    stem = tmp_path / "eval"
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--out={stem}", "--per_category=1",
         "--splits=test", "--categories=base,miss_func", "--max_reply_tokens=8",
         "--max_episode_tokens=2048", "--tool_retrieval=bm25", "--tool_retrieval_k=all,5"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(Path(f"{stem}.retrieval.json").read_text())
    assert [(r["split"], r["k"]) for r in rows] == [("test", "all"), ("test", "5")]
    assert all(r["recall_turns"] > 0 and r["prompt_tokens"] > 0 for r in rows)
    assert rows[0]["recall"] == 1.0  # every tool shown: both tasks' ground truth is offered
    reports = json.loads(stem.with_suffix(".json").read_text())
    assert [r["split"] for r in reports] == ["test k=all", "test k=5"]
    assert all(len(r["entries"]) == 2 for r in reports)
    table = stem.with_suffix(".md").read_text()
    assert "| split | k | BFCL overall | mean prompt tokens | GT recall | turns |" in table
    assert "| test | 5 |" in table
    assert Path(f"{stem}.retrieval.png").stat().st_size > 0


BAD_FLAGS = [
    (["--tool_retrieval=bm25", "--tool_retrieval_k=all,0"], "--tool_retrieval_k"),
    (["--tool_retrieval=dense", "--tool_retrieval_encoder=/no/such/dir"],
     "tool_retrieval_encoder='/no/such/dir'"),
]


def test_bad_retrieval_flags_fail_before_anything_loads():
    assert_flag_errors("launch/evaluate.py", BAD_FLAGS)
