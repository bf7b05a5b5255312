"""Our own OpenAI-compatible server (`seetjax.serving`, as `launch/serve.py` runs it) with a real
model, as a distillation teacher and reviewer, over HTTP on 127.0.0.1. The test model (the
serving tests' taught embedded default) cannot do these tasks, so its traces are rejected with
reasons while the oracle's are accepted, in one run that ends in SFT dialogs."""

import ml_collections
import pytest

from seetjax.distill.endpoints import PreflightError, RunBudget
from seetjax.distill.load import parse_config
from seetjax.distill.pipeline import run
from seetjax.distill.pools import Pool
from seetjax.distill.to_sft import convert_output
from seetjax.distill.validators import VALIDATORS
from seetjax.distill.writer import read_outcomes
from tests.distill.distilllib import endpoint, live_oracle, raw_config, with_urls
from tests.serving.servinglib import MODEL_NAME, LiveServer

SHORT = {"temperature": 0.0, "max_tokens": 24, "seed": 0}


@pytest.mark.slow
def test_served_model_and_oracle_teach_one_run_into_sft_dialogs(tmp_path, server, tokenizer):
    from seetjax.data.formatter import format_dialogs
    from seetjax.sft.run import load_dialogs

    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 6, "difficulty": "easy"}],
                     teachers=[endpoint("local", server.url, MODEL_NAME, provider="seetjax",
                                        sampling=SHORT, timeout_s=300),
                               endpoint("oracle", "http://127.0.0.1:9/v1")],
                     concurrency={"max_workers": 4})
    config = parse_config(raw)
    pool = Pool("teacher_pool", config.teacher_pool, config, RunBudget())
    by_local = {f"telecom/easy/0/{i}" for i in range(6)
                if pool.order(f"telecom/easy/0/{i}")[0].name == "local"}
    assert 0 < len(by_local) < 6
    with live_oracle(raw) as (url, _):
        summary = run(with_urls(raw, {"oracle": url}))
    assert summary.committed == {"accepted": 6 - len(by_local), "rejected": len(by_local)}
    for outcome in read_outcomes(tmp_path / "out"):
        teacher = outcome.record.metadata.generation.teacher
        if outcome.scenario_id in by_local:  # the model's own replies, kept for QA, with why
            assert outcome.status == "rejected" and outcome.reason in VALIDATORS
            assert outcome.detail and (teacher.endpoint, teacher.provider) == ("local", "seetjax")
            assert any(t.role == "assistant" for t in outcome.record.turns)
        else:
            assert outcome.status == "accepted" and teacher.endpoint == "oracle"
    path = tmp_path / "dialogs.jsonl"
    assert convert_output(str(tmp_path / "out"), path) == 6 - len(by_local)
    dialogs, _ = load_dialogs(ml_collections.ConfigDict({"source": "jsonl"}), str(path))
    examples, report = format_dialogs(dialogs, tokenizer, 8192, truncate=True)
    assert len(examples) == len(dialogs) and not report.dropped


@pytest.mark.slow
def test_a_reviewer_answering_prose_is_asked_again_then_rejected(tmp_path, server):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 2, "difficulty": "easy"}],
                     reviewer_pool=[endpoint("local", server.url, MODEL_NAME, sampling=SHORT,
                                             timeout_s=300)],
                     review_flow={"enabled": True, "max_rounds": 0, "parse_retries": 1})
    with live_oracle(raw) as (url, _):
        summary = run(with_urls(raw, {"oracle": url}))
    assert summary.reasons == {"review_unparsed": 2}
    assert summary.usage["reviewer_pool"]["local"]["requests"] == 2 * 2
    for outcome in read_outcomes(tmp_path / "out"):
        assert outcome.detail.count("; ") == 1  # both readings failed, both said why


def test_preflight_names_an_endpoint_whose_key_is_refused(tmp_path, engine, monkeypatch):
    from seetjax.serving.app import create_app
    from seetjax.serving.deps import ServerConfig

    keyed = create_app(engine, ServerConfig(model_name=MODEL_NAME, api_key="right-key"))
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 0}],
                     teachers=[endpoint("local", "http://127.0.0.1:9/v1", MODEL_NAME,
                                        api_key_env="SEETJAX_TEST_KEY")])
    with LiveServer(keyed) as live:
        monkeypatch.setenv("SEETJAX_TEST_KEY", "wrong-key")
        with pytest.raises(PreflightError, match=r"endpoint 'local' \(http://127.0.0.1:\d+/v1\): "
                                                 r"the key in \$SEETJAX_TEST_KEY was refused"):
            run(with_urls(raw, {"local": live.url}))
        monkeypatch.setenv("SEETJAX_TEST_KEY", "right-key")
        assert run(with_urls(raw, {"local": live.url})).committed == {}
