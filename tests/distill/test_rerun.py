"""Reruns of one output over real HTTP on 127.0.0.1: scenarios the teacher failed are tried again,
the rules that judged the records change only on purpose, and usage and budgets add up over
every invocation."""

import copy
import json

import pytest

from seetjax.distill.analytics import write_report
from seetjax.distill.pipeline import run
from seetjax.distill.servers import fault_app
from seetjax.distill.writer import RuleChange, read_outcomes, read_records, read_usage
from tests.distill.distilllib import endpoint, live_oracle, raw_config, with_urls
from tests.serving.servinglib import LiveServer

EASY = [{"family": "telecom", "quota": 4, "difficulty": "easy"}]


def test_a_rerun_retries_the_scenarios_the_teacher_failed(tmp_path):
    raw = raw_config(tmp_path / "out", EASY)
    with live_oracle(raw) as (url, oracle), LiveServer(fault_app(oracle, ["500"])) as broken:
        failed = run(with_urls(raw, {"oracle": broken.url}))
        assert failed.reasons == {"teacher_failed": 4}
        again = run(with_urls(raw, {"oracle": url}))
    assert again.committed == {"accepted": 4} and again.retried == 4 and again.skipped == 0
    assert [o.status for o in read_outcomes(tmp_path / "out")] == ["accepted"] * 4
    assert (tmp_path / "out" / "rejected.jsonl").read_text() == ""
    assert len(list(read_records(str(tmp_path / "out")))) == 4


def test_which_failures_a_rerun_retries_is_configured(tmp_path):
    raw = raw_config(tmp_path / "kept", EASY, retry_failed=[])
    with live_oracle(raw) as (url, oracle), LiveServer(fault_app(oracle, ["500"])) as broken:
        run(with_urls(raw, {"oracle": broken.url}))
        kept = run(with_urls(raw, {"oracle": url}))
    assert kept.committed == {} and kept.skipped == 4
    assert kept.usage["teacher_pool"]["oracle"]["requests"] == 0
    assert {o.reason for o in read_outcomes(tmp_path / "kept")} == {"teacher_failed"}

    raw = raw_config(tmp_path / "judged", EASY)  # a validator's rejection stands by default
    with live_oracle(raw, narrative="zh") as (chinese, _), live_oracle(raw) as (english, _):
        assert run(with_urls(raw, {"oracle": chinese})).reasons == {"language_policy": 4}
        assert run(with_urls(raw, {"oracle": english})).committed == {}
        raw["retry_failed"] = ["teacher_failed", "language_policy"]
        assert run(with_urls(raw, {"oracle": english})).committed == {"accepted": 4}


def test_a_rerun_under_other_rules_is_refused_unless_allowed(tmp_path):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 2, "difficulty": "easy"}],
                     review_flow={"enabled": True},
                     reviewer_pool=[endpoint("judge", "http://127.0.0.1:9/v1")])
    weaker = copy.deepcopy(raw)
    weaker["scenarios"][0]["quota"] = 4
    weaker["review_flow"] = {"enabled": False}
    weaker["validation"] = {"validators": ["schema", "execution"], "required": ["schema"]}
    with live_oracle(raw) as (url, _):
        urls = {"oracle": url, "judge": url}
        assert run(with_urls(raw, urls)).committed == {"accepted": 2}
        with pytest.raises(RuleChange) as refused:
            run(with_urls(weaker, urls))
        summary = run(with_urls(weaker, urls), allow_rule_change=True)
    message = str(refused.value)
    assert "review_flow.enabled: true -> false" in message and "--allow_rule_change" in message
    assert "validation.required: " in message and "validation.validators: " in message
    assert summary.committed == {"accepted": 2}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [r["since"] for r in manifest["rules"]] == [0, 2]  # which outcomes each set judged
    assert manifest["rules"][1]["rules"]["review_flow"]["enabled"] is False


def test_usage_and_budgets_add_up_over_reruns(tmp_path):
    whole = raw_config(tmp_path / "whole", [{"family": "telecom", "quota": 6, "difficulty": "easy"}])
    split = raw_config(tmp_path / "split", [{"family": "telecom", "quota": 3, "difficulty": "easy"}])
    with live_oracle(whole) as (url, _):
        once = run(with_urls(whole, {"oracle": url}))
        run(with_urls(split, {"oracle": url}))
        split["scenarios"][0]["quota"] = 6
        second = run(with_urls(split, {"oracle": url}))
    assert second.usage != once.usage  # this invocation's share...
    assert second.total_usage == once.usage == read_usage(tmp_path / "split")  # ...and the sum
    report = write_report(tmp_path / "split", tmp_path / "report")
    assert json.loads((tmp_path / "report" / "stats.json").read_text())["usage"] == once.usage
    requests = once.usage["teacher_pool"]["oracle"]["requests"]
    assert f'"requests": {requests}' in report.read_text()

    for i, budget in enumerate([  # the run's budget, an endpoint's
            {"budget": {"max_requests": 5}},
            {"teachers": [endpoint("oracle", "http://127.0.0.1:9/v1", max_requests=5)]}]):
        raw = raw_config(tmp_path / f"budget{i}", EASY, concurrency={"max_workers": 1}, **budget)
        with live_oracle(raw) as (url, _):
            first = run(with_urls(raw, {"oracle": url}))
            again = run(with_urls(raw, {"oracle": url}))
        assert first.budget_spent and first.undone
        assert again.budget_spent and again.committed == {} and again.undone == first.undone
        assert again.usage["teacher_pool"]["oracle"]["requests"] == 0
