"""FPLD: first point of logical divergence, with hypothesis properties."""

import hypothesis.strategies as st
from hypothesis import given, settings

from seetjax.envs.bfcl.data import class_schemas
from seetjax.seet.fpld import as_call, calls_match, first_divergence
from seetjax.tools.calls import ToolCall

SCHEMAS = {s.name: s for s in class_schemas("GorillaFileSystem")}


def test_equal_sequences_in_any_spelling():
    failed = ["cd(folder='docs')", {"name": "mv", "arguments": {"destination": "b", "source": "a"}}]
    anchor = [ToolCall("cd", {"folder": "docs"}), "mv(source='a', destination='b')"]
    assert first_divergence(failed, anchor) is None


def test_positional_arguments_are_named_through_the_schema():
    assert first_divergence(["sort('report.pdf')"], ["sort(file_name='report.pdf')"],
                            SCHEMAS) is None
    assert as_call("sort('x')", SCHEMAS).args == {"file_name": "x"}


def test_numbers_and_booleans():
    assert calls_match("f(a=1)", "f(a=1.0)")
    assert not calls_match("f(a=True)", "f(a=1)")
    assert not calls_match("f(a=1)", "f(a=2)")
    assert calls_match("f(a=[1, (2, 3)])", "f(a=[1.0, [2, 3]])")
    assert calls_match("f(a={'x': 1, 'y': 2})", "f(a={'y': 2, 'x': 1})")


def test_string_normalisation():
    assert not calls_match("f(a=' X ')", "f(a='x')")
    assert not calls_match("f(a=' X ')", "f(a='x')", strings="strip")
    assert calls_match("f(a=' x ')", "f(a='x')", strings="strip")
    assert calls_match("f(a=' X ')", "f(a='x')", strings="casefold")


def test_kinds_and_named_keys():
    d = first_divergence(["cd(folder='a')", "ls()"], ["cd(folder='a')", "pwd()"])
    assert (d.index, d.kind, d.failed.name, d.anchor.name) == (1, "tool_name", "ls", "pwd")
    d = first_divergence(["mv(source='a', extra=1, destination='c')"],
                         ["mv(source='a', destination='b', mode='x')"])
    assert d.kind == "argument"
    assert (d.missing_keys, d.extra_keys, d.changed_keys) == (("mode",), ("extra",),
                                                              ("destination",))
    assert "missing `mode`" in d.diagnosis and "wrong value for `destination`" in d.diagnosis
    d = first_divergence(["ls()", "pwd()"], ["ls()"])
    assert (d.index, d.kind, d.anchor) == (1, "extra_call", None)
    d = first_divergence(["ls()"], ["ls()", "pwd()"])
    assert (d.index, d.kind, d.failed, d.anchor.name) == (1, "missing_call", None, "pwd")
    assert d.to_json()["kind"] == "missing_call"


def test_calls_match_by_identity_before_position():
    # [B, A'] against [A, B]: B is B wherever it sits; A' is A with a wrong argument
    d = first_divergence(["mkdir(dir_name='t')", "cd(folder='x')"],
                         ["cd(folder='docs')", "mkdir(dir_name='t')"])
    assert (d.kind, d.index, d.failed.name, d.anchor.name, d.changed_keys) == (
        "argument", 1, "cd", "cd", ("folder",))
    positional = first_divergence(["mkdir(dir_name='t')", "cd(folder='x')"],
                                  ["cd(folder='docs')", "mkdir(dir_name='t')"], match="position")
    assert (positional.kind, positional.index) == ("tool_name", 0)
    assert first_divergence(["ls()", "pwd()"], ["pwd()", "ls()"]) is None  # a reordering
    d = first_divergence(["cd(folder='a')", "mv(source='x', destination='b')"],
                         ["cd(folder='a')", "mkdir(dir_name='b')", "mv(source='x', destination='b')"])
    assert (d.kind, d.index, d.failed, d.anchor.name) == ("missing_call", 1, None, "mkdir")
    d = first_divergence(["pwd()", "ls()", "cd(folder='a')"], ["cd(folder='a')", "ls()"])
    assert (d.kind, d.index, d.failed.name, d.anchor) == ("extra_call", 0, "pwd", None)
    d = first_divergence(["ls()", "grep(pattern='a')"], ["grep(pattern='b')", "ls()"])
    assert (d.kind, d.index, d.changed_keys) == ("argument", 1, ("pattern",))


NAMES = st.sampled_from(["ls", "cd", "mv", "grep"])
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab ", max_size=3),
                      lambda inner: st.lists(inner, max_size=2), max_leaves=4)
CALLS = st.builds(ToolCall, NAMES, st.dictionaries(st.sampled_from("xyz"), VALUES, max_size=2))
SEQUENCES = st.lists(CALLS, max_size=5)


@settings(max_examples=300, deadline=None)
@given(SEQUENCES)
def test_equal_sequences_do_not_diverge(calls):
    assert first_divergence(calls, list(calls)) is None


@settings(max_examples=300, deadline=None)
@given(SEQUENCES, SEQUENCES)
def test_by_position_the_index_is_the_first_differing_position(a, b):
    d = first_divergence(a, b, match="position")
    differs = [i for i, (x, y) in enumerate(zip(a, b)) if x.key() != y.key()]
    if differs:
        assert d is not None and d.index == differs[0]
        assert d.kind == ("tool_name" if a[d.index].name != b[d.index].name else "argument")
    elif len(a) == len(b):
        assert d is None
    else:
        assert d.index == min(len(a), len(b))


@settings(max_examples=300, deadline=None)
@given(SEQUENCES, SEQUENCES)
def test_prefix_relation_gives_extra_or_missing_at_the_shorter_length(prefix, rest):
    if not rest:
        return
    assert first_divergence(prefix + rest, list(reversed(prefix + rest))) is None
    longer = prefix + rest
    d = first_divergence(longer, prefix)
    assert (d.kind, d.index, d.failed) == ("extra_call", len(prefix), rest[0])
    d = first_divergence(prefix, longer)
    assert (d.kind, d.index, d.anchor) == ("missing_call", len(prefix), rest[0])


@settings(max_examples=300, deadline=None)
@given(SEQUENCES, SEQUENCES)
def test_identity_matching_flags_only_calls_without_an_equal_partner(a, b):
    d = first_divergence(a, b)
    if sorted(c.key() for c in a) == sorted(c.key() for c in b):
        assert d is None  # the same calls in any order
        return
    assert d is not None and 0 <= d.index <= len(a)
    count = lambda calls, call: sum(c == call for c in calls)  # noqa: E731
    if d.kind == "missing_call":
        assert count(b, d.anchor) > count(a, d.anchor)
    else:  # the flagged call is one of the failed calls the anchor has no equal left for
        assert d.failed is a[d.index] or d.failed == a[d.index]
        assert count(a, d.failed) > count(b, d.failed)
