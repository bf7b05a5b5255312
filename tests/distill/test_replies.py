"""Teacher replies of every shape, over real HTTP on 127.0.0.1: a malformed reply is retried or
becomes a named rejection, never the end of the run; a reply that trickles in is cut at the
endpoint's deadline; language detection of a huge reply is bounded."""

import collections
import json
import time

from seetjax.distill import language
from seetjax.distill.language import detect, language_mix
from seetjax.distill.pipeline import run
from seetjax.distill.servers import fault_app
from seetjax.distill.writer import read_outcomes
from tests.distill.distilllib import endpoint, live_oracle, raw_config, with_urls
from tests.serving.servinglib import LiveServer


def _message(body):
    return body["choices"][0]["message"]


def _with_call(body, arguments):
    _message(body)["tool_calls"] = [{"id": "c0", "type": "function",
                                     "function": {"name": "lookup", "arguments": arguments}}]
    return body


def _set_message(**fields):
    def mutate(body):
        _message(body).update(fields)
        return body
    return mutate


def _set_function(**fields):
    def mutate(body):
        _with_call(body, "{}")
        _message(body)["tool_calls"][0]["function"] = fields
        return body
    return mutate


# Replies no chat completion may be: retried (the answer after them is a good one).
def no_choices(body): return {k: v for k, v in body.items() if k != "choices"}
def empty_choices(body): return {**body, "choices": []}
def empty_choice(body): return {**body, "choices": [{}]}
def choices_not_a_list(body): return {**body, "choices": {"0": body["choices"][0]}}
def choice_not_an_object(body): return {**body, "choices": ["hello"]}
def body_a_list(body): return [body]
def body_null(body): return None
def body_a_string(body): return "hello"
def not_utf8(body): return json.dumps(body).encode().replace(b'"assistant"', b'"assist\xe9nt"')
def bad_usage(body): return {**body, "usage": {"prompt_tokens": "many", "completion_tokens": -3}}
def usage_not_an_object(body): return {**body, "usage": [1, 2]}
def bad_finish_reason(body):
    body["choices"][0]["finish_reason"] = 7
    return body


def null_message(body):
    body["choices"][0]["message"] = None
    return body


def number_content(body): return _set_message(content=42)(body)
def list_content(body): return _set_message(content=[{"type": "text", "text": "hi"}])(body)
def calls_not_a_list(body): return _set_message(tool_calls="lookup")(body)
def null_call(body): return _set_message(tool_calls=[None])(body)
def call_without_function(body): return _set_message(tool_calls=[{"id": "c0"}])(body)
def function_without_name(body): return _set_function(arguments="{}")(body)
def function_empty_name(body): return _set_function(name="", arguments="{}")(body)
def function_without_arguments(body): return _set_function(name="lookup")(body)
def arguments_an_object(body): return _set_function(name="lookup", arguments={"a": 1})(body)


MALFORMED = [no_choices, empty_choices, empty_choice, choices_not_a_list, choice_not_an_object,
             body_a_list, body_null, body_a_string, not_utf8, bad_usage, usage_not_an_object,
             bad_finish_reason, null_message, number_content, list_content, calls_not_a_list,
             null_call, call_without_function, function_without_name, function_empty_name,
             function_without_arguments, arguments_an_object]


# Well-formed replies a model may give: they go to the episode, which names what is wrong.
def arguments_not_json(body): return _with_call(body, "{oops")
def arguments_a_list(body): return _with_call(body, "[1, 2]")
def arguments_null(body): return _with_call(body, "null")
def arguments_a_number(body): return _with_call(body, "3")
def empty_reply(body): return _set_message(content=None, tool_calls=None)(body)
def no_usage(body): return {k: v for k, v in body.items() if k != "usage"}


WELL_FORMED = [arguments_not_json, arguments_a_list, arguments_null, arguments_a_number,
               empty_reply, no_usage]


def test_every_reply_shape_is_retried_or_a_named_rejection(tmp_path):
    """Each odd reply is followed by a good one: malformed ones are retried (no scenario fails
    for them), odd but well-formed ones reach the episode; every scenario gets an outcome."""
    schedule = [f for shape in MALFORMED + WELL_FORMED for f in (shape, None)]
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 20, "difficulty": "easy"}],
                     concurrency={"max_workers": 1}, review_flow={"enabled": True},
                     reviewer_pool=[endpoint("judge", "http://127.0.0.1:9/v1")])
    counts = collections.Counter()
    with live_oracle(raw) as (_, oracle), \
            LiveServer(fault_app(oracle, schedule, counts=counts)) as faulty:
        summary = run(with_urls(raw, {"oracle": faulty.url, "judge": faulty.url}))
    assert set(counts) == {f.__name__ for f in MALFORMED + WELL_FORMED} | {"ok"}
    assert sum(summary.committed.values()) == 20 and summary.undone == 0
    assert "teacher_failed" not in summary.reasons and "reviewer_failed" not in summary.reasons
    failures = sum(u["failures"] for pool in summary.usage.values() for u in pool.values())
    assert failures == sum(counts[f.__name__] for f in MALFORMED)
    for outcome in read_outcomes(tmp_path / "out"):
        assert outcome.status == "accepted" or (outcome.reason and outcome.detail)


def test_malformed_replies_from_every_attempt_are_a_named_teacher_failure(tmp_path):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 2, "difficulty": "easy"}],
                     concurrency={"max_workers": 1})  # each scenario's 3 attempts: the 3 faults
    with live_oracle(raw) as (_, oracle), \
            LiveServer(fault_app(oracle, [null_call, not_utf8, empty_choice])) as faulty:
        summary = run(with_urls(raw, {"oracle": faulty.url}))
    assert summary.reasons == {"teacher_failed": 2}
    details = [o.detail for o in read_outcomes(tmp_path / "out")]
    assert all("failed after 3 attempt(s): MalformedReply" in d for d in details)
    assert all("choices[0].message" in d for d in details)


def test_a_trickling_reply_is_cut_at_the_endpoint_deadline(tmp_path):
    """Each byte comes quickly (no read waits long) but the reply would take ~10 s: the
    endpoint's `timeout_s` bounds the whole call, which is retried and answered in time."""
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 1, "difficulty": "easy"}],
                     teachers=[endpoint("oracle", "http://127.0.0.1:9/v1", timeout_s=0.5)])
    counts = collections.Counter()
    with live_oracle(raw) as (_, oracle), \
            LiveServer(fault_app(oracle, ["trickle", None], trickle_s=0.02,
                                 counts=counts)) as slow:
        start = time.perf_counter()
        summary = run(with_urls(raw, {"oracle": slow.url}))
        elapsed = time.perf_counter() - start
    assert summary.committed == {"accepted": 1} and counts["trickle"] >= 2
    assert summary.usage["teacher_pool"]["oracle"]["retries"] == counts["trickle"]
    assert elapsed < 0.5 * counts["trickle"] + 3


def test_language_detection_of_a_huge_reply_is_bounded(monkeypatch):
    # The detector's work is what is bounded (~1 us a character on the event loop's thread):
    # the characters it is given are counted, not timed.
    read = []
    monkeypatch.setattr(language, "detect", lambda text: read.append(len(text)) or detect(text))
    bound = language.DETECT_CHARS + language.SENTENCE_CHARS
    english = "The account balance was checked and the new plan is active now. " * 34_000
    french = "Le solde du compte a été vérifié et le nouveau forfait est actif. " * 17_000
    mix = language_mix([english + french])  # 3.3 MB: 3.5 s when every sentence was read
    assert 0 < sum(read) <= bound < len(english + french) / 100
    assert abs(mix.english_share - 2 / 3) < 0.05
    read.clear()
    unbroken = language_mix([english.replace(".", "")])  # one 2.2 MB sentence
    assert read == [language.SENTENCE_CHARS]
    assert unbroken.chars == {"en": len(english.replace(".", "").strip())}
