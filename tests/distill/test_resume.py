"""kill -9 at random points of a run, then a rerun: the same records as an uninterrupted run,
none lost, none written twice."""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from seetjax.distill.pipeline import run
from seetjax.distill.writer import JOURNAL, read_outcomes, read_records
from tests.distill.distilllib import GENERATED, live_oracle, raw_config, with_urls

ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.slow
def test_kill_9_at_random_points_then_rerun_is_exactly_once(tmp_path):
    scenarios = [{"family": "terminal", "quota": 40, "params": GENERATED},
                 {"family": "telecom", "quota": 40}]
    raw = raw_config(tmp_path / "killed", scenarios, concurrency={"max_workers": 8})
    raw["output"]["shard_size"] = 12
    reference = raw_config(tmp_path / "reference", scenarios, concurrency={"max_workers": 3})
    reference["output"]["shard_size"] = 12
    rng = random.Random(0)
    with live_oracle(raw) as (url, _):
        run(with_urls(reference, {"oracle": url}))
        raw["teacher_pool"][0]["base_url"] = url
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(raw))
        command = [sys.executable, "launch/distill.py", f"--config={path}"]
        journal = tmp_path / "killed" / JOURNAL
        for target in sorted(rng.sample(range(5, 70), 3)):
            process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while _lines(journal) < target and process.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.2))  # anywhere: between commits, in a shard write
            assert process.poll() is None, "the run ended before its kill"
            process.kill()  # SIGKILL
            process.wait()
            assert _lines(journal) < 80
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]

    outcomes = read_outcomes(tmp_path / "killed")
    ids = [o.scenario_id for o in outcomes]
    assert len(ids) == len(set(ids)) == 80 == _lines(journal)  # every scenario committed once
    killed = [r.row() for r in read_records(str(tmp_path / "killed"))]
    expected = [r.row() for r in read_records(str(tmp_path / "reference"))]
    assert len(killed) == 80 and [r["id"] for r in killed] == [r["id"] for r in expected]
    assert killed == expected  # same records, same shards as the uninterrupted run
    parquet = [r.row() for r in read_records(str(tmp_path / "killed"), "parquet")]
    assert parquet == killed
    manifest = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    listed = {f for s in manifest["shards"] for f in s["files"].values()}
    assert {p.name for p in (tmp_path / "killed").glob("shard-*")} == listed
