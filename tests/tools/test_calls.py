"""Tool-call parsing: the three formats, positional arguments, canonical form, clear errors."""

import json
import keyword
import sys
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seetjax.envs.bfcl.data import class_schemas, load_tasks
from seetjax.tools.calls import (
    MAX_VALUE_DEPTH,
    ParseError,
    ToolCall,
    parse_python_calls,
    parse_tool_calls,
)
from seetjax.tools.json_calls import parse_hermes_calls, parse_json_calls
from seetjax.tools.schema import ToolSchema

FS = {s.name: s for s in class_schemas("GorillaFileSystem")}


def test_python_list_of_calls():
    calls = parse_python_calls("[cd(folder='document'), mv(source='a.txt', destination='b')]")
    assert calls == [ToolCall("cd", {"folder": "document"}),
                     ToolCall("mv", {"source": "a.txt", "destination": "b"})]


def test_python_single_call_fences_and_literals():
    text = "```python\n[f(a=-1.5, b=[1, (2, 3)], c={'k': None}, d=True)]\n```"
    [call] = parse_python_calls(text)
    assert call.args == {"a": -1.5, "b": [1, (2, 3)], "c": {"k": None}, "d": True}
    assert parse_python_calls("f()") == [ToolCall("f", {})]


@pytest.mark.parametrize("text", ["", "   ", "[]", "I moved the file for you.",
                                  "Sorry (I cannot) do that."])
def test_python_plain_text_is_no_call(text):
    assert parse_python_calls(text) == []


def test_python_positional_arguments_map_through_the_schema():
    assert parse_python_calls("[sort('report.pdf')]", FS) == [ToolCall("sort", {"file_name": "report.pdf"})]
    # Without a schema (or for an unknown tool) they are kept aside for validation to report.
    [call] = parse_python_calls("[sort('report.pdf')]")
    assert call.positional == ("report.pdf",) and call.args == {}
    # A clash with a keyword is not silently resolved.
    [call] = parse_python_calls("[sort('a', file_name='b')]", FS)
    assert call.positional == ("a",)


def test_python_positional_binds_in_signature_order():
    travel = {s.name: s for s in class_schemas("TravelAPI")}
    [call] = parse_python_calls("[purchase_insurance('tok', 'basic', 'b1', 50.0, 'c1')]", travel)
    assert call.args == {"access_token": "tok", "insurance_type": "basic", "booking_id": "b1",
                         "insurance_cost": 50.0, "card_id": "c1"}


def test_all_ground_truth_strings_parse_with_positionals_mapped():
    for category in ("base", "miss_param"):
        for task in load_tasks(category):
            for calls in task.ground_truth:
                assert all(not c.positional for c in calls)


@pytest.mark.parametrize("text, fragment, column", [
    ("[cd(folder=foo)]", "bare name", 12),
    ("[cd(folder=true)]", "write True", 12),
    ("[os.system('ls')]", "plain tool name", 2),
    ("[__import__('os').system('ls')]", "plain tool name", 2),
    ("[cd(folder='a' + 'b')]", "BinOp", 12),
    ("[cd(folder=open('x'))]", "call inside the arguments", 12),
    ("[cd(**{'folder': 'x'})]", "unpacking", 5),
    ("[cd(*['x'])]", "unpacking", 5),
    ("[cd(folder=b'x')]", "bytes", 12),
    ("[cd(folder={1: 'x'})]", "keys must be strings", 13),
    ("[cd(folder=f'{x}')]", "JoinedStr", 12),
    ("[cd(folder=1e999)]", "finite", 12),
    ("[cd(folder='x')", "invalid syntax", None),
    ("Sure! [cd(folder='x')]", "text before the call list", 7),
])
def test_python_errors_say_what_and_where(text, fragment, column):
    error = parse_python_calls(text)
    assert isinstance(error, ParseError), error
    assert fragment in error.message
    if column is not None:
        assert (error.line, error.column) == (1, column)
    assert "python" in str(error)


def test_dotted_tool_names_are_read_only_where_the_schemas_document_them():
    doc = {"name": "math.factorial", "parameters": {"properties": {"n": {"type": "integer"}}}}
    schemas = {"math.factorial": ToolSchema.from_doc(doc)}
    assert parse_python_calls("[math.factorial(5)]", schemas) == [ToolCall("math.factorial", {"n": 5})]
    for text, known in (("[math.factorial(n=5)]", None), ("[os.system('ls')]", schemas),
                        ("[math.gamma(n=5)]", schemas), ("[f().g(n=5)]", schemas)):
        error = parse_python_calls(text, known)
        assert isinstance(error, ParseError) and "plain tool name" in error.message, text


def test_python_error_position_counts_characters_not_bytes():
    text = "[echo(content='héllo wörld', file_name=x)]"
    error = parse_python_calls(text)
    assert isinstance(error, ParseError)
    assert error.column == text.index("=x)") + 2  # 1-based column of the x


def test_deep_nesting_and_huge_literals_are_errors_not_crashes():
    deep = "[f(a=" + "[" * (MAX_VALUE_DEPTH + 2) + "]" * (MAX_VALUE_DEPTH + 2) + ")]"
    assert "nested deeper" in parse_python_calls(deep).message
    assert isinstance(parse_python_calls("[f(a=" + "[" * 5000 + ")]"), ParseError)
    assert isinstance(parse_python_calls("[f(a=" + "9" * 6000 + ")]"), ParseError)
    assert isinstance(parse_tool_calls("x" * 70_000), ParseError)
    assert isinstance(parse_json_calls('{"name": "f", "arguments": ' + "[" * 100_000), ParseError)


def test_hermes_several_blocks_with_text_around():
    text = ('Let me check.\n<tool_call>{"name": "cd", "arguments": {"folder": "docs"}}</tool_call>\n'
            '<tool_call>\n{"name": "ls", "arguments": "{\\"a\\": true}"}\n</tool_call>')
    assert parse_hermes_calls(text) == [ToolCall("cd", {"folder": "docs"}), ToolCall("ls", {"a": True})]
    assert parse_hermes_calls("No tools needed.") == []


@pytest.mark.parametrize("text, fragment", [
    ('<tool_call>{"name": "cd", "arguments": {"folder": "x"}}', "unclosed"),
    ('x </tool_call>', "without <tool_call>"),
    ('<tool_call>{"name": "cd", "arguments": {"folder": }}</tool_call>', "invalid JSON"),
    ('<tool_call>[{"name": "cd"}]</tool_call>', "one JSON object"),
    ('<tool_call>{"name": "os.system", "arguments": {}}</tool_call>', "identifier"),
    ('<tool_call>{"name": "cd", "arguments": [1]}</tool_call>', "JSON object"),
    ('<tool_call>{"name": "cd", "args": {}}</tool_call>', "unexpected key"),
    ('<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>', "finite"),
])
def test_hermes_errors(text, fragment):
    error = parse_hermes_calls(text)
    assert isinstance(error, ParseError) and fragment in error.message, error


def test_hermes_error_location_points_into_the_block():
    text = 'ok\n<tool_call>{"name": "cd", "arguments": {"folder": }}</tool_call>'
    error = parse_hermes_calls(text)
    assert (error.line, error.column) == (2, text.splitlines()[1].index("}}") + 1)


def test_json_object_and_list_and_bfcl_keys():
    assert parse_json_calls('{"name": "cd", "arguments": {"folder": "x"}}') == [
        ToolCall("cd", {"folder": "x"})]
    assert parse_json_calls('[{"function": "pwd", "parameters": {}}, {"name": "ls"}]') == [
        ToolCall("pwd", {}), ToolCall("ls", {})]
    assert parse_json_calls("plain words") == []


def test_auto_format_detection():
    assert parse_tool_calls('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>') == [ToolCall("pwd")]
    assert parse_tool_calls('[{"name": "pwd", "arguments": {}}]') == [ToolCall("pwd")]
    assert parse_tool_calls("[pwd()]") == [ToolCall("pwd")]
    assert isinstance(parse_tool_calls("[pwd()]", fmt="xml"), ParseError)


def test_canonical_form_and_renderings():
    a = ToolCall("f", {"x": 1, "y": [1.0, (2, 3)]})
    b = ToolCall("f", {"y": [1, [2, 3]], "x": 1.0})
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert ToolCall("f", {"x": True}) != ToolCall("f", {"x": 1})
    assert a.to_python() == "f(x=1, y=[1.0, (2, 3)])"
    assert parse_tool_calls(a.to_hermes()) == [a]


def test_python_decoding_matches_bfcl_decoder_on_keyword_calls():
    """Our parser reads BFCL's python format as bfcl_eval's own decoder does (keyword calls)."""
    stubs = {name: mock.MagicMock() for name in
             ("tenacity", "tree_sitter", "tree_sitter_java", "tree_sitter_javascript")}
    with mock.patch.dict(sys.modules, stubs):
        from bfcl_eval.model_handler.utils import default_decode_execute_prompting
    for task in load_tasks("base")[:60]:
        for calls in task.ground_truth:
            if calls:
                text = "[" + ", ".join(c.to_python() for c in calls) + "]"
                assert default_decode_execute_prompting(text) == [c.to_python() for c in calls]
                assert parse_python_calls(text) == list(calls)


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
_NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name))


@settings(max_examples=200, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_NAMES, st.dictionaries(_NAMES, _VALUES, max_size=4)), min_size=1, max_size=3))
def test_round_trip_through_every_format(specs):
    calls = [ToolCall(name, args) for name, args in specs]
    python_text = "[" + ", ".join(c.to_python() for c in calls) + "]"
    assert parse_python_calls(python_text) == calls
    assert parse_hermes_calls("\n".join(c.to_hermes() for c in calls)) == calls
    assert parse_json_calls(json.dumps([c.to_json() for c in calls])) == calls


_CULPRITS = ["BAD_NAME", "1 + 2", "b'x'", "open('x')", "1e999", "9" * 70]


def _culprit_corpus() -> list[tuple[str, str]]:
    """(message, culprit): python-format messages refused at their one `culprit`, after
    non-ASCII text (2-, 3- and 4-byte UTF-8, a combining mark) on its line and the lines before,
    inside fences, after blank lines, on one line or several."""
    texts = ["ü", "中文字", "😀", "e\u0301", "plain"]
    corpus = []
    for i, culprit in enumerate(_CULPRITS):
        for text in texts:
            before = f"f(a='{text}', b=[{{'k{text}': '{text * 3}'}}])"
            call = f"g(x='{text}', y={culprit}, z='{text}')"
            for wrap in ("[{0}, {1}]", "[{0},\n {1}]", "```\n[{0},\n\n    {1}]\n```",
                         "\n  {1}", "```python\n[\n{0},\n{0}, {1}]\n```"):
                corpus.append((wrap.format(before, call), culprit))
        corpus.append((f"Sure {texts[i % len(texts)]}!\n  [f(a={culprit})]", "[f("))
    return corpus


@pytest.mark.parametrize("text, culprit", _culprit_corpus())
def test_python_error_positions_point_at_the_culprit(text, culprit):
    """Line and column (1-based, in characters) land on the culprit, whatever non-ASCII text
    precedes it (ast's columns count UTF-8 bytes)."""
    error = parse_python_calls(text)
    assert isinstance(error, ParseError) and error.line is not None, error
    line = text.split("\n")[error.line - 1]
    assert line[error.column - 1:].startswith(culprit), (error, line)


def test_python_parsing_locates_nothing_until_it_fails():
    """Locating a node reads the message up to it: done for every literal, it made parsing
    quadratic (a 64 KB reply took seconds, more with one non-ASCII character). A parse that
    succeeds locates nothing, one that fails locates its error once, at any length."""
    from seetjax.tools import calls as module

    for size in (16_384, 65_000):
        items, length = [], 0
        while length < size - 100:  # one line, the case that took longest
            items.append(f"f(a={len(items)}, b='é', c=[1.5, None, {{'k': True}}])")
            length += len(items[-1]) + 2
        good, bad = "[" + ", ".join(items) + "]", "[" + ", ".join(items) + ", f(a=x)]"
        with mock.patch.object(module, "_offset_of", wraps=module._offset_of) as located:
            assert len(parse_python_calls(good)) == len(items)
            assert located.call_count == 0
            error = parse_python_calls(bad)
            assert located.call_count == 1
        assert isinstance(error, ParseError) and error.column == bad.index("=x)") + 2


_KEYS = (st.text(max_size=4) | st.integers(-5, 5) | st.booleans() | st.none()
         | st.floats(allow_nan=False, allow_infinity=False, width=16)
         | st.tuples(st.integers(-3, 3), st.text(max_size=2) | st.tuples(st.booleans())))
_ANY_KEYED = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                   | st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=10)


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_NAMES, _ANY_KEYED, max_size=4))
def test_json_renderings_take_any_dict_keys(args):
    """Official decoding keeps bfcl_eval's non-string keys below the top level (tuples, numbers,
    None): the JSON renderings write every key as `str` does, the canonical form's keys, so
    a call reads back equal to itself."""
    call = ToolCall("f", args)
    text = call.to_hermes()
    assert json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>")) == call.to_json()
    assert parse_hermes_calls(text) == [call]


def test_json_renderings_are_total():
    for value in (10**5000, float("nan"), {(1, (2, None)): {3: [10**100]}}, [{None: -0.0}],
                  {10**5000: 1}):
        call = ToolCall("f", {"a": value})
        assert json.loads(call.to_hermes()[len("<tool_call>"):-len("</tool_call>")])["name"] == "f"
        assert call.key() and json.dumps(call.to_json())
