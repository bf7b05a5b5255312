"""Counterfactual records: both lines are the calls that executed; the reply blamed."""

import random

import pytest

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


# Targets aligned by call: the anchor's replies split or merge the calls differently from the
# failed ones, and the target still holds the corrected call. Tokens encode calls, so a target
# decodes back to the calls it trains.
STOP, TEXT = 99, 98
DOC, TMP, TEMP = (ToolCall("cd", {"folder": "document"}), ToolCall("mkdir", {"dir_name": "tmp"}),
                  ToolCall("mkdir", {"dir_name": "temp"}))
LS, CD_X = ToolCall("ls", {}), ToolCall("cd", {"folder": "x"})
_CODES: dict[str, int] = {}


def _code(call: ToolCall) -> int:
    return _CODES.setdefault(repr(call.key()), 1000 + len(_CODES))


def render(calls):
    return [_code(c) for c in calls]


def decode(ids):
    assert ids[-1] == STOP
    if tuple(ids) == (TEXT, STOP):
        return "end"
    names = {v: k for k, v in _CODES.items()}
    return [names[i] for i in ids[:-1]]


def keys(calls):
    return [repr(c.key()) for c in calls]


def anchor_of(*replies):
    """An anchor whose steps are `replies` (tuples of calls), then the turn-ending reply."""
    steps = [AnchorStep(tuple(r), tuple(render(r)) + (STOP,)) for r in replies]
    return Anchor("task", 0, "k", tuple(steps) + (AnchorStep((), (TEXT, STOP)),), "peer")


def line(*replies):
    """A failed turn's replies, every call executed, then the turn-ending reply."""
    steps = [StepView(2 * i + 1, (500 + i,), tuple(r)) for i, r in enumerate(replies)]
    return steps + [StepView(2 * len(replies) + 1, (600,), ())]


def records_against(anchor, steps):
    return records_for_turn("task", 0, 0, 3, steps, anchor, lambda segment: [segment], render,
                            STOP)


CASES = {
    # the case: one failed reply, the anchor split in two
    "merged failed, split anchor": (line([DOC, TMP]), anchor_of([DOC], [TEMP]), [DOC, TEMP]),
    "split failed, merged anchor": (line([DOC], [TMP]), anchor_of([DOC, TEMP]), [TEMP]),
    "split both": (line([DOC], [TMP]), anchor_of([DOC], [TEMP]), [TEMP]),
    "merged both": (line([DOC, TMP]), anchor_of([DOC, TEMP]), [DOC, TEMP]),
    "wrong tool after a right call": (line([DOC, LS]), anchor_of([DOC], [TEMP]), [DOC, TEMP]),
    "missing call, merged anchor": (line([DOC]), anchor_of([DOC, TEMP]), [TEMP]),
    "missing call, split anchor": (line([DOC]), anchor_of([DOC], [TEMP]), [TEMP]),
    "out of order": (line([TEMP], [CD_X]), anchor_of([DOC], [TEMP]), [DOC]),
    "extra call: stop where the anchor did": (line([DOC, TEMP, LS]), anchor_of([DOC], [TEMP]),
                                              [DOC, TEMP]),
    "extra call after all calls: end the turn": (line([DOC], [TEMP], [LS]),
                                                 anchor_of([DOC], [TEMP]), "end"),
}


@pytest.mark.parametrize("name", CASES)
def test_the_target_holds_the_corrected_call_however_replies_are_split(name):
    steps, anchor, want = CASES[name]
    (record,) = records_against(anchor, steps)
    target = decode(record.anchor_ids)
    assert target == (want if want == "end" else keys(want))
    if record.divergence.anchor is not None:
        assert repr(record.divergence.anchor.key()) in target
        assert anchor.calls[record.divergence.anchor_index] == record.divergence.anchor


def test_a_retried_attempt_is_trained_toward_the_corrected_call():
    steps = [StepView(1, (11,), (DOC, TMP), attempt=True, executed=()),
             StepView(3, (12,), (DOC,)), StepView(5, (13,), (TEMP,)), StepView(7, (14,), ())]
    (record,) = records_against(anchor_of([DOC], [TEMP]), steps)
    assert (record.failed_ids, record.divergence.kind, record.divergence.index) == (
        (11,), "argument", 1)
    assert decode(record.anchor_ids) == keys([DOC, TEMP])


def test_targets_hold_the_corrected_call_over_random_splits():
    """Any anchor grouping, any failed grouping, one corrupted call: every record's target is
    made of anchor calls the turn had not made before the failed reply, and holds the corrected
    call when there is one."""
    rng = random.Random(0)
    pool = [ToolCall(n, {"a": v}) for n in ("cd", "mkdir", "mv", "ls") for v in range(3)]

    def split(calls):
        cuts = sorted(rng.sample(range(1, len(calls)), rng.randint(0, len(calls) - 1)))
        return [calls[i:j] for i, j in zip([0] + cuts, cuts + [len(calls)])]

    checked = 0
    for _ in range(400):
        gold = rng.sample(pool, rng.randint(2, 5))
        failed = list(gold)
        i = rng.randrange(len(failed))
        change = rng.choice(("argument", "tool", "drop", "extra", "swap"))
        if change == "argument":
            failed[i] = ToolCall(failed[i].name, {"a": 7})
        elif change == "tool":
            failed[i] = ToolCall("rm", dict(failed[i].args))
        elif change == "drop":
            del failed[i]
        elif change == "extra":
            failed.insert(i, ToolCall("pwd", {}))
        else:
            j = rng.randrange(len(failed))
            failed[i], failed[j] = failed[j], ToolCall(failed[i].name, {"a": 8})
        if not failed:
            continue
        steps = line(*split(failed))
        anchor = anchor_of(*split(gold))
        for record in records_against(anchor, steps):
            k = next(n for n, s in enumerate(steps) if s.ids == record.failed_ids)
            before = [c for s in steps[:k] for c in s.calls]
            target = decode(record.anchor_ids)
            if record.divergence.anchor is not None:
                assert repr(record.divergence.anchor.key()) in target
            if target != "end":
                left = keys(gold)
                for key in keys(before):
                    if key in left:
                        left.remove(key)
                assert all(t in left for t in target) and target == [t for t in left
                                                                     if t in target]
            checked += 1
    assert checked > 300
