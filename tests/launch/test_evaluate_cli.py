"""`launch/evaluate.py` on the embedded default: a report per split in markdown and JSON."""

import json
import subprocess
import sys
from pathlib import Path

from tests.launch.flagcheck import assert_flag_errors

ROOT = Path(__file__).resolve().parents[2]


def test_evaluate_script_writes_reports(embedded_dir, tmp_path):
    stem = tmp_path / "not" / "made" / "yet" / "eval"  # directories are made before evaluating
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--out={stem}", "--per_category=1",
         "--splits=test", "--max_reply_tokens=8", "--max_episode_tokens=1024"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(stem.with_suffix(".json").read_text())
    assert report[0]["split"] == "test" and len(report[0]["entries"]) == 4
    assert set(report[0]["accuracy"]) == {"base", "miss_func", "miss_param", "long_context"}
    assert "| test |" in stem.with_suffix(".md").read_text()


BAD_FLAGS = [
    (["--splits=train,bogus"], "--splits"), (["--categories=base,nope"], "--categories"),
    (["--per_category=-1"], "--per_category"), (["--max_reply_tokens=0"], "--max_reply_tokens"),
    (["--max_episode_tokens=100", "--max_reply_tokens=256"], "--max_episode_tokens"),
    (["--compact_description_chars=-1"], "--compact_description_chars"),
    (["--run=x", "--model=y"], "--run or --model"), (["--temperature=-1"], "--temperature"),
    (["--decoding=lenient,strict"], "--decoding")]


def test_bad_flags_fail_before_anything_loads():
    assert_flag_errors("launch/evaluate.py", BAD_FLAGS + [(["--per_category=3"], "")])
    out = subprocess.run([sys.executable, "launch/evaluate.py", "--per_category=-1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)  # the real command line
    assert out.returncode != 0 and "--per_category" in out.stderr, out.stderr[-1000:]
    assert "Traceback" not in out.stderr
