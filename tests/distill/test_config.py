"""The run config: every bad field is named before any request; overrides; shipped configs."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from seetjax.distill.config import ConfigError
from seetjax.distill.load import apply_overrides, load_config, parse_config
from tests.distill.distilllib import endpoint, raw_config

ROOT = Path(__file__).resolve().parents[2]


def _set(raw, path, value):
    node = raw
    *parents, last = path
    for part in parents:
        node = node[part]
    node[last] = value


@pytest.mark.parametrize("path, value, named", [
    (("teacher_pool", 0, "base_url"), "localhost:8000",
     "teacher_pool[0].base_url: must be an http(s):// URL"),
    (("teacher_pool", 0, "sampling"), {"temperature": -1},
     "teacher_pool[0].sampling.temperature"),
    (("teacher_pool", 0, "api_key_env"), "SEETJAX_TEST_UNSET_KEY",
     "teacher_pool[0].api_key_env: $SEETJAX_TEST_UNSET_KEY is not set (endpoint 'oracle')"),
    (("scenarios", 0, "family"), "nope", "scenarios[0].family: unknown family 'nope'"),
    (("scenarios", 0, "params"), {"bogus": 1}, "scenarios[0].params: ScenarioSpec.params={'bogus': 1}: "
     "family 'telecom' takes"),
    (("scenarios", 0, "quota"), -1, "scenarios[0].quota"),
    (("concurrency",), {"max_workers": 0}, "concurrency.max_workers"),
    (("teachers",), [], "teachers: Extra inputs are not permitted"),
    (("preferred_order",), ["ghost"], "preferred_order[0]: 'ghost' names no endpoint"),
    (("review_flow",), {"enabled": True}, "reviewer_pool: review_flow.enabled needs"),
    (("validation",), {"validators": ["schema", "nope"], "required": ["schema"]},
     "validation.validators[1]: unknown validator 'nope'"),
    (("output", "formats"), ["csv"], "output.formats[0]"),
    (("teacher_pool", 0, "weight"), float("inf"),
     "teacher_pool[0].weight: Input should be a finite number"),
    (("teacher_pool", 0, "weight"), 1e308,
     "teacher_pool[0].weight: Input should be less than or equal to 1000000"),
    (("teacher_pool", 0, "base_url"), "http://", "teacher_pool[0].base_url: 'http://' has no host"),
    (("teacher_pool", 0, "base_url"), "http://127.0.0.1:70000/v1",
     "teacher_pool[0].base_url: 'http://127.0.0.1:70000/v1' has no port in 1..65535"),
    (("teacher_pool", 0, "base_url"), "http://127.0.0.1:0/v1", "has no port in 1..65535"),
    (("review_flow",), {"min_score": float("nan")},
     "review_flow.min_score: Input should be a finite number"),
    (("retries",), {"max_s": float("inf")}, "retries.max_s: Input should be a finite number"),
])
def test_bad_fields_are_named(tmp_path, path, value, named):
    raw = raw_config(tmp_path)
    _set(raw, path, value)
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert named in str(e.value)


@pytest.mark.parametrize("field", ["url", "state_dir"])
def test_an_output_that_cannot_be_written_is_named_and_nothing_is_created(tmp_path, field):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    raw = raw_config(tmp_path / "out")
    raw["output"][field] = str(blocker / "out")
    with pytest.raises(ConfigError, match=rf"output.{field}: '{blocker}/out' cannot be "
                                          rf"created: {blocker} is not a directory"):
        parse_config(raw)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize("flag, named", [
    ("--port=70000", "--port"), ("--port=0", "--port"), ("--sft_min_score=nan", "--sft_min_score"),
    ("--sft_min_score=1.5", "--sft_min_score")])
def test_launcher_refuses_bad_flags_before_anything(tmp_path, flag, named):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path / "out")))
    serve = ["--serve=oracle"] if flag.startswith("--port") else []
    done = subprocess.run([sys.executable, "launch/distill.py", f"--config={path}", flag, *serve],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and named in done.stderr
    assert not (tmp_path / "out").exists()


def test_duplicate_endpoint_names_and_specs_are_named(tmp_path):
    raw = raw_config(tmp_path, teachers=[endpoint("a", "http://127.0.0.1:9/v1"),
                                         endpoint("a", "http://127.0.0.1:8/v1")])
    with pytest.raises(ConfigError, match=r"teacher_pool\[1\].name: 'a' appears twice"):
        parse_config(raw)
    raw = raw_config(tmp_path, scenarios=[{"family": "telecom", "quota": 1}] * 2)
    with pytest.raises(ConfigError, match=r"scenarios\[1\]: the same family"):
        parse_config(raw)


def test_overrides_reach_nested_fields_and_list_items(tmp_path):
    raw = apply_overrides(raw_config(tmp_path), ["concurrency.max_workers=32",
                                                 "teacher_pool.0.weight=3",
                                                 "scenarios.0.params={intents: [usage]}"])
    config = parse_config(raw)
    assert config.concurrency.max_workers == 32 and config.teacher_pool[0].weight == 3
    assert config.scenarios[0].params == {"intents": ["usage"]}
    with pytest.raises(ConfigError, match="teacher_pool.5 is not an index"):
        apply_overrides(raw_config(tmp_path), ["teacher_pool.5.weight=1"])


def test_shipped_configs_validate(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.setenv("SEETJAX_API_KEY", "unused")
    paths = sorted((ROOT / "configs" / "distill").glob("*.yaml"))
    families = {load_config(p).scenarios[0].family for p in paths}
    assert families == {"terminal", "support", "travel", "telecom"}


def test_launcher_names_the_bad_field_before_any_request(tmp_path):
    raw = raw_config(tmp_path / "out")
    raw["teacher_pool"][0]["weight"] = 0  # and port 9 answers nothing: no request is tried
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = subprocess.run([sys.executable, "launch/distill.py", f"--config={path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "teacher_pool[0].weight: Input should be greater than 0" in done.stderr
    assert not (tmp_path / "out").exists()
