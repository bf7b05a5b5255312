"""Distillation runs over real HTTP on 127.0.0.1 against the oracle and fault endpoints: validated
records in identical JSONL and Parquet shards, SFT dialogs, pools, retries and fallbacks, review
rounds, the language policy, and preflight errors naming the endpoint."""

import asyncio
import collections
import json
import time

import ml_collections
import pytest

from seetjax.distill.analytics import write_report
from seetjax.distill.endpoints import PreflightError, RunBudget
from seetjax.distill.load import parse_config
from seetjax.distill.pipeline import run, run_async
from seetjax.distill.pools import Pool
from seetjax.distill.scenarios import scenario_stream
from seetjax.distill.servers import fault_app, oracle_app, review_script
from seetjax.distill.to_sft import convert_output
from seetjax.distill.writer import read_outcomes, read_records
from seetjax.envs.bfcl.checker import check_entry
from seetjax.tools.calls import ToolCall
from tests.distill.distilllib import GENERATED, endpoint, live_oracle, raw_config, with_urls
from tests.serving.servinglib import LiveServer

FOUR_FAMILIES = [{"family": f, "quota": 3, "params": GENERATED}
                 for f in ("terminal", "support", "travel")] + [{"family": "telecom", "quota": 3}]


def _trajectory(record):
    """The calls of a record per user turn and step, as the checker reads them."""
    turns = [[] for _ in range(1 + max(t.turn for t in record.turns))]
    for t in record.turns:
        if t.tool_calls:
            turns[t.turn].append([ToolCall(c.name, json.loads(c.arguments))
                                  for c in t.tool_calls])
    return turns


def test_oracle_run_gives_checked_records_in_identical_shards_and_sft_dialogs(tmp_path,
                                                                             tokenizer):
    from seetjax.data.formatter import format_dialogs
    from seetjax.sft.run import load_dialogs

    raw = raw_config(tmp_path / "out", FOUR_FAMILIES, concurrency={"max_workers": 4},
                     language_policy={"require_chinese_summary": True},
                     episode={"reflection_passes": 1})
    with live_oracle(raw) as (url, _):
        summary = run(with_urls(raw, {"oracle": url}))
    assert summary.committed == {"accepted": 12} and summary.undone == 0
    config = parse_config(raw)
    tasks = {s.id: s.task for s in scenario_stream(config.scenarios)}
    records = list(read_records(config.output.url))
    assert [r.id for r in records] == list(tasks)  # scenario order, whatever finished first
    for record in records:  # 100% pass BFCL's checker, judged again from the written calls
        assert check_entry(tasks[record.id], _trajectory(record)).valid, record.id
        meta = record.metadata
        assert meta.generation.teacher.endpoint == "oracle" and meta.score == 1.0
        assert json.loads(meta.generation.teacher.sampling)["temperature"] == 0.0
        assert meta.language_policy.chinese_summary_present and not meta.validation_feedback
        assert meta.reflection_passes == 1
    parquet = [r.row() for r in read_records(config.output.url, "parquet")]
    assert parquet == [r.row() for r in records]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [s["records"] for s in manifest["shards"]] == [8, 4]

    path = tmp_path / "dialogs.jsonl"
    assert convert_output(config.output.url, path) == 12
    dialogs, _ = load_dialogs(ml_collections.ConfigDict({"source": "jsonl"}), str(path))
    examples, report = format_dialogs(dialogs, tokenizer, 8192, truncate=True)
    assert len(examples) == 12 and not report.dropped
    assert all(sum(e.loss_mask) > 0 for e in examples)

    report_md = write_report(tmp_path / "out", tmp_path / "report", spot_checks=2)
    text = report_md.read_text()
    assert "acceptance rate 100.0%" in text and (tmp_path / "report" / "coverage.png").exists()


def test_pool_weights_preferred_order_and_usage(tmp_path):
    specs = [endpoint("a", "http://127.0.0.1:9/v1", weight=3),
             endpoint("b", "http://127.0.0.1:9/v1", weight=1),
             endpoint("c", "http://127.0.0.1:9/v1", weight=1)]
    raw = raw_config(tmp_path, teachers=specs[:2])
    pool = Pool("teacher_pool", parse_config(raw).teacher_pool, parse_config(raw), RunBudget())
    firsts = collections.Counter(pool.order(f"s/{i}")[0].name for i in range(400))
    assert abs(firsts["a"] / 400 - 0.75) <= 0.05
    raw = raw_config(tmp_path, teachers=specs, preferred_order=["c", "b"])
    config = parse_config(raw)
    pool = Pool("teacher_pool", config.teacher_pool, config, RunBudget())
    for i in range(20):
        order = [e.name for e in pool.order(f"s/{i}")]
        assert order[1:] == [n for n in ("c", "b", "a") if n != order[0]]

    # Over HTTP: each scenario is played by its first choice, and usage adds up.
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 24, "difficulty": "easy"}],
                     teachers=specs[:2])
    with live_oracle(raw) as (url, oracle), LiveServer(oracle_app(oracle)) as second:
        config = with_urls(raw, {"a": url, "b": second.url})
        summary = run(config)
    pool = Pool("teacher_pool", config.teacher_pool, config, RunBudget())
    records = list(read_records(config.output.url))
    assert len(records) == 24
    for record in records:
        assert record.metadata.generation.teacher.endpoint == pool.order(record.id)[0].name
    usage = summary.usage["teacher_pool"]
    assert usage["a"]["requests"] > usage["b"]["requests"] > 0
    assert usage["a"]["failures"] == usage["b"]["failures"] == 0


def test_faults_are_retried_with_backoff_then_fall_back(tmp_path):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 3, "difficulty": "easy"}],
                     teachers=[endpoint("faulty", "http://127.0.0.1:9/v1", timeout_s=0.3),
                               endpoint("oracle", "http://127.0.0.1:9/v1", weight=0.001)],
                     retries={"max_attempts": 6, "initial_s": 0.01, "max_s": 0.05,
                              "jitter_s": 0.01},
                     # One request at a time: each walks the fault cycle, 5 faults then an answer.
                     concurrency={"max_workers": 1})
    faults = collections.Counter()
    with live_oracle(raw) as (url, oracle), \
            LiveServer(fault_app(oracle, ["429", "500", "timeout", "malformed", "truncated", None],
                                 timeout_sleep_s=0.6, counts=faults)) as faulty:
        summary = run(with_urls(raw, {"oracle": url, "faulty": faulty.url}))
    assert summary.committed == {"accepted": 3}  # the run finishes with the faults in the pool
    assert set(faults) == {"429", "500", "timeout", "malformed", "truncated", "ok"}
    usage = summary.usage["teacher_pool"]
    assert usage["faulty"]["retries"] >= 5 and usage["oracle"]["requests"] == 0
    for record in read_records(str(tmp_path / "out")):  # faults alone never spend 6 attempts
        assert record.metadata.generation.teacher.endpoint == "faulty"
        assert not record.metadata.generation.fallbacks

    # An endpoint that always fails is retried, then hands over to the next in preferred_order.
    raw = raw_config(tmp_path / "out2", [{"family": "telecom", "quota": 4, "difficulty": "easy"}],
                     teachers=[endpoint("broken", "http://127.0.0.1:9/v1"),
                               endpoint("spare", "http://127.0.0.1:9/v1", weight=0.001),
                               endpoint("oracle", "http://127.0.0.1:9/v1", weight=0.001)],
                     preferred_order=["oracle", "spare"])
    failing = collections.Counter()
    with live_oracle(raw) as (url, oracle), \
            LiveServer(fault_app(oracle, ["500"], counts=failing)) as broken:
        summary = run(with_urls(raw, {"oracle": url, "spare": url, "broken": broken.url}))
    assert summary.committed == {"accepted": 4}
    assert summary.usage["teacher_pool"]["broken"]["requests"] == 4 * 3  # max_attempts each
    assert summary.usage["teacher_pool"]["spare"]["requests"] == 0
    for record in read_records(str(tmp_path / "out2")):
        generation = record.metadata.generation
        assert generation.teacher.endpoint == "oracle"
        assert "'broken' failed after 3 attempt(s): InternalServerError" in generation.fallbacks[0]


def test_retry_after_is_honoured(tmp_path):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 1, "difficulty": "easy"}],
                     retries={"max_attempts": 3, "initial_s": 0.0, "max_s": 0.0,
                              "jitter_s": 0.0})
    faults = collections.Counter()
    with live_oracle(raw) as (_, oracle), \
            LiveServer(fault_app(oracle, ["429", None], retry_after_s=0.3,
                                 counts=faults)) as faulty:
        start = time.perf_counter()
        summary = run(with_urls(raw, {"oracle": faulty.url}))
        elapsed = time.perf_counter() - start
    assert summary.committed == {"accepted": 1}
    assert elapsed >= 0.3 * faults["429"] and faults["429"] >= 2


def test_review_rounds_are_recorded_and_min_score_drops(tmp_path):
    scenarios = [{"family": "terminal", "quota": 3, "params": GENERATED}]
    review = {"enabled": True, "min_score": 0.7, "max_rounds": 1}
    raw = raw_config(tmp_path / "out", scenarios, review_flow=review,
                     reviewer_pool=[endpoint("judge", "http://127.0.0.1:9/v1")])
    script = review_script({0: {"score": 0.4, "needs_revision": True,
                                "feedback": "Name every file you changed."},
                            1: {"score": 0.9, "needs_revision": False}})
    with live_oracle(raw, review_policy=script) as (url, _):
        run(with_urls(raw, {"oracle": url, "judge": url}))
    records = list(read_records(str(tmp_path / "out")))
    assert len(records) == 3
    for record in records:
        rounds = record.metadata.generation.review_rounds
        assert [(r.round, r.score, r.reviewer_endpoint) for r in rounds] == [
            (0, 0.4, "judge"), (1, 0.9, "judge")]
        assert rounds[0].feedback == "Name every file you changed." and record.metadata.score == 0.9
        assert "Name every file you changed." in record.turns[0].content  # fed back to the teacher

    raw["output"]["url"] = str(tmp_path / "low")
    low = review_script({0: {"score": 0.3, "needs_revision": True, "feedback": "Too terse."}})
    with live_oracle(raw, review_policy=low) as (url, _):
        summary = run(with_urls(raw, {"oracle": url, "judge": url}))
    assert summary.committed == {"rejected": 3} and summary.reasons == {"review": 3}
    for outcome in read_outcomes(tmp_path / "low"):
        assert "score 0.3 < min_score 0.7" in outcome.detail
        assert len(outcome.record.metadata.generation.review_rounds) == 2


def test_language_policy_rejects_chinese_narrative_and_missing_summary(tmp_path):
    raw = raw_config(tmp_path / "zh", [{"family": "telecom", "quota": 2}])
    with live_oracle(raw, narrative="zh") as (url, _):
        summary = run(with_urls(raw, {"oracle": url}))
    assert summary.reasons == {"language_policy": 2}
    for outcome in read_outcomes(tmp_path / "zh"):
        assert "English" in outcome.detail
        assert outcome.record.metadata.language_policy.english_share < 0.6

    raw = raw_config(tmp_path / "nosummary", [{"family": "telecom", "quota": 2, "prompt": {
        "require_chinese_summary": True}}])
    with live_oracle(raw, summary_marker="") as (url, _):
        summary = run(with_urls(raw, {"oracle": url}))
    assert summary.reasons == {"language_policy": 2}
    assert all("lacks its Chinese summary" in o.detail for o in read_outcomes(
        tmp_path / "nosummary"))


def test_preflight_names_an_unreachable_endpoint(tmp_path):
    raw = raw_config(tmp_path / "out", teachers=[endpoint("gone", "http://127.0.0.1:9/v1")])
    with pytest.raises(PreflightError, match=r"endpoint 'gone' \(http://127.0.0.1:9/v1\) is "
                                             "unreachable"):
        asyncio.run(run_async(parse_config(raw)))
    assert not (tmp_path / "out").exists()  # a run that cannot start leaves nothing behind
    with live_oracle(raw) as (url, _):
        config = with_urls(raw, {"gone": url})
        config = config.model_copy(update={"teacher_pool": (
            config.teacher_pool[0].model_copy(update={"model": "other"}),)})
        with pytest.raises(PreflightError, match="serves \\['oracle'\\], not model 'other'"):
            run(config)


def test_a_spent_budget_leaves_scenarios_for_a_rerun_that_extends_quotas(tmp_path):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 6, "difficulty": "easy"}],
                     budget={"max_requests": 5}, concurrency={"max_workers": 1})
    extended = raw_config(tmp_path, [{"family": "telecom", "quota": 8, "difficulty": "easy"}])
    with live_oracle(extended) as (url, _):
        first = run(with_urls(raw, {"oracle": url}))
        assert first.budget_spent and first.undone > 0
        assert first.committed == {"accepted": 6 - first.undone}
        raw["budget"] = {"max_requests": 0}
        raw["scenarios"][0]["quota"] = 8  # a rerun skips what is done and extends the quota
        again = run(with_urls(raw, {"oracle": url}))
    assert again.skipped == 6 - first.undone and again.committed == {"accepted": 2 + first.undone}
    ids = [r.id for r in read_records(str(tmp_path / "out"))]
    assert sorted(ids) == sorted(f"telecom/easy/0/{i}" for i in range(8))
