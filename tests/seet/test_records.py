"""Counterfactual records: both lines are the calls that executed; the reply blamed."""

from seetjax.seet.anchors import Anchor, AnchorStep
from seetjax.seet.records import StepView, records_for_turn
from seetjax.tools.calls import ToolCall

CD, MKDIR, MV = (ToolCall("cd", {"folder": "d"}), ToolCall("mkdir", {"dir_name": "t"}),
                 ToolCall("mv", {"source": "f", "destination": "t"}))
BAD_MKDIR = ToolCall("mkdir", {"dir_name": 5})
ANCHOR = Anchor("task", 0, "k", (AnchorStep((CD, MKDIR, MV), (1,)), AnchorStep((), (2,))),
                "peer")


def records(steps):
    return records_for_turn("task", 0, 0, 3, steps, ANCHOR, lambda segment: [segment],
                            lambda calls: [100 + len(calls)], 99)


def test_a_retried_attempts_executed_calls_are_part_of_the_line():
    # [cd ok, mkdir(5) rejected] retried, then the turn ended: mkdir is missing after cd
    steps = [StepView(1, (11,), (CD, BAD_MKDIR), attempt=True, executed=(CD,)),
             StepView(3, (12,), ())]
    line, attempt = records(steps)
    assert (line.divergence.kind, line.divergence.index, line.failed_ids) == (
        "missing_call", 1, (12,))
    assert line.anchor_ids == (101 + 1, 99)  # the anchor's mkdir, mv from call 1, rendered
    assert (attempt.divergence.kind, attempt.divergence.index, attempt.failed_ids) == (
        "argument", 1, (11,))


def test_a_reply_whose_calls_did_not_all_run_is_blamed_for_the_missing_call():
    steps = [StepView(1, (11,), (CD, BAD_MKDIR), executed=(CD,)), StepView(3, (12,), ())]
    (line,) = records(steps)
    assert (line.divergence.kind, line.divergence.index, line.failed_ids) == (
        "missing_call", 1, (11,))
    assert line.anchor_ids == (1,)  # the anchor's own reply from call 0


def test_a_divergence_in_an_attempts_executed_calls_is_recorded_once():
    wrong_cd = ToolCall("cd", {"folder": "x"})
    steps = [StepView(1, (11,), (wrong_cd,), attempt=True, executed=(wrong_cd,)),
             StepView(3, (12,), (CD, MKDIR, MV)), StepView(5, (13,), ())]
    (line,) = records(steps)  # the wrong cd ran: it is an extra call of the executed line
    assert (line.divergence.kind, line.divergence.index, line.failed_ids) == (
        "extra_call", 0, (11,))


def test_undone_and_intercepted_attempts_are_not_part_of_the_line():
    steps = [StepView(1, (11,), (MKDIR,), attempt=True, executed=()),
             StepView(3, (12,), (CD, MKDIR, MV)), StepView(5, (13,), ())]
    (attempt,) = records(steps)  # the line itself matches the anchor
    assert (attempt.divergence.kind, attempt.divergence.index) == ("tool_name", 0)
