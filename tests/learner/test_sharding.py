"""The same loss and gradients on 1 device and on 8 simulated devices in every layout."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOL = 1e-5


@pytest.mark.slow
def test_layouts_match_one_device():
    worker = Path(__file__).with_name("sharded_worker.py")
    out = subprocess.run([sys.executable, str(worker)], capture_output=True, text=True,
                         timeout=600, env=os.environ.copy())
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(report) == {"data=8", "fsdp=8", "tensor=8", "2x2x2"}
    for name, r in report.items():
        assert r["loss"] <= TOL and r["grad"] <= TOL, (name, r)
    assert report["data=8"]["sharded_params"] == 0  # pure data parallelism replicates params
    assert all(report[n]["sharded_params"] > 0 for n in ("fsdp=8", "tensor=8", "2x2x2"))
