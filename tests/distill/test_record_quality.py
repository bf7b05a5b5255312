"""Bad records are rejected with a named reason, whatever the reviewer says: an overlong final
answer, a reply cut by the length limit, a rationale or final answer in another language inside a
mostly English record, and a final answer naming tools the episode never called."""

import copy

from seetjax.distill.endpoints import SCENARIO_HEADER
from seetjax.distill.pipeline import run
from seetjax.distill.servers import fault_app
from seetjax.distill.validators import mentioned_tools
from seetjax.distill.writer import read_outcomes
from tests.distill.distilllib import live_oracle, raw_config, with_urls
from tests.serving.servinglib import LiveServer

LONG = " The request went through and your account is up to date." * 1100  # ~64 KB


def _long_answer(message, final):
    if final:
        message["content"] += LONG


def _cut(message, final):
    if final:
        message["content"] = message["content"][:25]
        return "length"
    return None


def _french_rationale(message, final):
    if final:  # enough English around it for the record as a whole to pass 60%
        message["content"] += (" Your line is now on the Unlimited plan, and the change applies "
                               "from today with no extra fee for the rest of this month.")
    else:
        message["content"] = ("Je vais d'abord consulter les forfaits disponibles, puis changer "
                              "le forfait.")


def _french_answer(message, final):
    if final:
        message["content"] = "Il n'y a aucune panne à Riverside, tout fonctionne normalement."
    else:
        message["content"] = ("I will check whether there is an outage in Riverside first, and "
                              "open a no-signal ticket only if there is one. The outage check "
                              "comes first because the ticket depends on its result.")


def _copied_answer(message, final):
    if final:  # another scenario's answer: tools this one never called
        message["content"] = ("I have completed your request using open_ticket, pay_balance; "
                              "the results are shown above.")


# telecom/easy/0/i -> (its defect, the reason it must be rejected with); 5 stays clean.
DEFECTS = {0: (_long_answer, "answer_length"), 1: (_cut, "truncated"),
           2: (_french_rationale, "language_policy"), 3: (_french_answer, "language_policy"),
           4: (_copied_answer, "faithfulness")}


def _tampering(oracle):
    """The oracle's replies with each scenario's defect applied (found by the scenario header)."""
    def handler(body, headers):
        response = copy.deepcopy(oracle(body, headers))
        index = int(headers[SCENARIO_HEADER].rsplit("/", 1)[1])
        if index in DEFECTS:
            choice = response["choices"][0]
            message = choice["message"]
            finish = DEFECTS[index][0](message, not message.get("tool_calls"))
            choice["finish_reason"] = finish or choice["finish_reason"]
        return response
    return handler


def test_bad_records_are_rejected_with_named_reasons(tmp_path):
    raw = raw_config(tmp_path / "out", [{"family": "telecom", "quota": 6, "difficulty": "easy"}])
    rationales_free = raw_config(tmp_path / "free", raw["scenarios"],
                                 language_policy={"english_parts": ["final_answer"]})
    with live_oracle(raw) as (_, oracle), LiveServer(fault_app(_tampering(oracle),
                                                               [None])) as live:
        summary = run(with_urls(raw, {"oracle": live.url}))
        free = run(with_urls(rationales_free, {"oracle": live.url}))
    outcomes = {int(o.scenario_id.rsplit("/", 1)[1]): o for o in read_outcomes(tmp_path / "out")}
    assert {i: (o.status, o.reason) for i, o in outcomes.items()} == {
        **{i: ("rejected", reason) for i, (_, reason) in DEFECTS.items()}, 5: ("accepted", "")}
    assert summary.committed == {"accepted": 1, "rejected": 5}
    assert "4000" in outcomes[0].detail
    assert "finish_reason 'length'" in outcomes[1].detail
    assert "rationale" in outcomes[2].detail and "fr" in outcomes[2].detail
    assert "final answer" in outcomes[3].detail and "fr" in outcomes[3].detail
    for i in (2, 3):  # the record as a whole is English enough: only the message fails
        assert outcomes[i].record.metadata.language_policy.english_share >= 0.6
    assert "open_ticket" in outcomes[4].detail and "pay_balance" in outcomes[4].detail
    # A policy naming final answers only lets the French rationale through, not the answer.
    assert free.committed == {"accepted": 2, "rejected": 4}
    assert free.reasons == {"answer_length": 1, "truncated": 1, "language_policy": 1,
                            "faithfulness": 1}


def test_tool_names_that_are_english_words_count_only_when_written_as_code():
    names = ["find", "sort", "get_account", "ls"]
    assert mentioned_tools("I could not find the file, so I sorted nothing.", names) == set()
    assert mentioned_tools("I ran `find -name a`, then ls -la.", names) == {"find"}
    assert mentioned_tools("I ran sort(files) and `ls`.", names) == {"sort", "ls"}
    assert mentioned_tools("Called get_account; get_accounts is no tool.", names) == {
        "get_account"}
