"""`launch/make_sft_data.py` writes BFCL dialogs (multi-turn, single-turn) that read back as valid
JSONL."""

import subprocess
import sys
from pathlib import Path

from seetjax.data.dialogs import read_jsonl, type_counts

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


def test_make_sft_data_writes_single_turn_dialogs_alone(tmp_path):
    out = tmp_path / "d.jsonl"
    run = subprocess.run([sys.executable, "launch/make_sft_data.py", f"--out={out}",
                          "--categories=", "--single_turn_selection=6",
                          "--single_turn_retrieval=4", "--prompt_style=native"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert type_counts(read_jsonl(out)) == {"tool_selection": 6, "multi_step_planning": 0,
                                            "timing_decision": 0, "tool_retrieval": 4}
    bad = subprocess.run([sys.executable, "launch/make_sft_data.py", f"--out={out}",
                          "--categories=", "--single_turn_retrieval=-5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "retrieval=-5" in bad.stderr
