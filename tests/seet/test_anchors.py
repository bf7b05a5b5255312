"""Anchor pool: priority, capacity, age, serialisation; anchor steps for records."""

import pytest

from seetjax.seet.anchors import Anchor, AnchorPool, AnchorStep, choose_anchor, state_key
from seetjax.seet.records import anchor_target_ids
from seetjax.tools.calls import ToolCall

A, B, C = (ToolCall(n, {}) for n in ("a", "b", "c"))


def anchor(source, at, calls=(A,), turn=0, key="k"):
    return Anchor("task", turn, key, (AnchorStep(tuple(calls), (1, 2)), AnchorStep((), (9,))),
                  source, at)


def test_priority_peer_then_historical_then_induced():
    pool = AnchorPool()
    pool.add(anchor("induced", 5, calls=(B,)))
    pool.add(anchor("historical", 1))
    assert pool.lookup("task", 0, "k", now=6).source == "historical"
    assert pool.lookup("task", 0, "k", now=6, sources=["induced"]).source == "induced"
    peers = {("task", 0, "k"): anchor("peer", 6, calls=(C,))}
    assert choose_anchor(("task", 0, "k"), peers, pool, 6, ["peer", "historical"]).source == "peer"
    assert choose_anchor(("task", 0, "k"), peers, pool, 6, ["historical"]).source == "historical"
    assert choose_anchor(("task", 1, "k"), peers, pool, 6, ["peer", "historical"]) is None
    with pytest.raises(ValueError, match="peer"):
        pool.add(anchor("peer", 1))


def test_capacity_recency_and_age():
    pool = AnchorPool(capacity=2, max_age=10)
    for step, call in enumerate((A, B, C)):
        pool.add(anchor("historical", step, calls=(call,)))
    assert len(pool) == 2 and pool.lookup("task", 0, "k", now=2).calls == [C]
    assert pool.lookup("task", 0, "k", now=12).calls == [C]
    assert pool.lookup("task", 0, "k", now=13) is None
    pool.evict_older_than(13)
    assert len(pool) == 0


def test_state_round_trip_and_keys():
    pool = AnchorPool(capacity=3, max_age=None)
    pool.add(anchor("historical", 1, calls=(ToolCall("cd", {"folder": "x"}),)))
    pool.add(anchor("induced", 2, turn=1))
    restored = AnchorPool()
    restored.load_state_dict(pool.state_dict())
    assert restored.state_dict() == pool.state_dict() and restored.counts() == pool.counts()
    assert state_key([A, B]) != state_key([B, A]) and state_key([]) == state_key(())


def test_anchor_target_ids_align_by_call():
    steps = (AnchorStep((A, B), (10, 11, 99)), AnchorStep((C,), (12, 99)), AnchorStep((), (13, 99)))
    a = Anchor("t", 0, "k", steps, "peer")
    render = lambda calls: [ord(c.name) for c in calls]  # noqa: E731
    assert anchor_target_ids(a, set(), 0, render, 99) == (10, 11, 99)  # one whole step: verbatim
    assert anchor_target_ids(a, {0}, 1, render, 99) == (ord("b"), 99)  # mid-step: rendered
    assert anchor_target_ids(a, {0, 1}, None, render, 99) == (12, 99)  # the next call's step
    # the corrected call sits in a later step than the first call not made: both, merged
    assert anchor_target_ids(a, set(), 2, render, 99) == (ord("a"), ord("b"), ord("c"), 99)
    assert anchor_target_ids(a, {0}, 2, render, 99) == (ord("b"), ord("c"), 99)
    assert anchor_target_ids(a, {0, 1, 2}, None, render, 99) == (13, 99)  # turn-ending reply
