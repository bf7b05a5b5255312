"""`launch/evaluate.py` on the embedded default: a report per split in markdown and JSON."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_evaluate_script_writes_reports(embedded_dir, tmp_path):
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--out={tmp_path / 'eval'}", "--per_category=1",
         "--splits=test", "--max_reply_tokens=8", "--max_episode_tokens=1024"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report[0]["split"] == "test" and len(report[0]["entries"]) == 4
    assert set(report[0]["accuracy"]) == {"base", "miss_func", "miss_param", "long_context"}
    assert "| test |" in (tmp_path / "eval.md").read_text()
