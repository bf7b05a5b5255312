"""`launch/sample.py`: replies to BFCL opening turns from the embedded default."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sample_script_runs(embedded_dir):
    out = subprocess.run(
        [sys.executable, "launch/sample.py", "--num_tasks=2", "--samples=1",
         "--max_new_tokens=4", "--temperature=0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert str(embedded_dir) in out.stdout
    counts = [line.rsplit(";", 1)[1] for line in out.stdout.splitlines()
              if "compiled so far" in line]
    assert len(counts) == 2 and counts[0] == counts[1]  # the second call compiled nothing
    assert out.stdout.count("assistant (4 tokens, length") == 2
