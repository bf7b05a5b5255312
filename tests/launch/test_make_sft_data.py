"""`launch/make_sft_data.py` writes BFCL dialogs that read back as valid JSONL."""

import subprocess
import sys
from pathlib import Path

from seetjax.data.dialogs import read_jsonl

ROOT = Path(__file__).resolve().parents[2]


def test_make_sft_data_writes_the_split(tmp_path):
    out = tmp_path / "d.jsonl"
    run = subprocess.run([sys.executable, "launch/make_sft_data.py", f"--out={out}",
                          "--split=validation", "--categories=base,miss_func",
                          "--prompt_style=compact", "--call_format=hermes"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    dialogs = read_jsonl(out)
    assert len(dialogs) == 20 and f"wrote 20 dialogs to {out}" in run.stdout
    assert {d.metadata["category"] for d in dialogs} == {"base", "miss_func"}
    assert all(d.metadata["split"] == "validation" for d in dialogs)
