"""`decode_official` against bfcl_eval's own `default_decode_execute_prompting`, from raw text.

Texts: every ground-truth call list of the four multi-turn categories (800 entries), as the model
would write it, and perturbations of each (positional arguments, code fences, bare names, tuples,
nested calls, binary expressions, wrapping quotes, missing brackets, ...). Where bfcl_eval decodes,
our calls must be the ones its executor's `eval` would receive (names, keyword values with their
exact types: tuple vs list, int vs bool); where it fails, ours must fail; where it computes or
runs part of the text, ours must say so. bfcl_eval's decoder `eval`s binary expressions: the only
ones given to it are the benign `2 + 3` written here.
"""

from __future__ import annotations

import ast
import random
import sys
from typing import Any
from unittest import mock

import pytest

from seetjax.envs.bfcl import single_turn as bfcl_single
from seetjax.envs.bfcl.data import CATEGORIES, load_tasks
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.envs.bfcl.official import (
    decode_official,
    decode_official_ast,
    is_evaluation_error,
    official_call_string,
)
from seetjax.tools.calls import ParseError, ToolCall, parse_python_calls, parse_tool_calls
from tests.envs.bfcl.single_turn_perturb import ground_truth


def _bfcl_decoders():
    stubs = {name: mock.MagicMock() for name in
             ("tenacity", "tree_sitter", "tree_sitter_java", "tree_sitter_javascript")}
    with mock.patch.dict(sys.modules, stubs):
        from bfcl_eval.model_handler import utils
    return utils


@pytest.fixture(scope="module")
def bfcl_decode():
    return _bfcl_decoders().default_decode_execute_prompting


def _value(node: ast.AST) -> Any:
    """What `eval` makes of a rendered literal; a call (something it would run) raises."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.List):
        return [_value(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    raise LookupError(ast.unparse(node))


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types throughout (a tuple is not a list, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _bfcl_calls(strings: list[str]) -> list[tuple[str, dict[str, Any]]] | str:
    """bfcl_eval's execution strings as the (name, keyword values) its executor's `eval` calls;
    "unreadable" when one of them is not Python (that `eval` fails), "executes" when one would
    run anything but one call of literal keyword values (a nested call, a second call)."""
    calls = []
    for text in strings:
        try:
            compile(text, "<bfcl_eval>", "eval")  # its `eval`'s first step; nothing runs
        except SyntaxError:
            return "unreadable"
        node = ast.parse(text, mode="eval").body
        if not isinstance(node, ast.Call) or node.args or any(k.arg is None for k in node.keywords):
            return "executes"
        try:
            args = {k.arg: _value(k.value) for k in node.keywords}
        except LookupError:
            return "executes"
        calls.append((ast.unparse(node.func), args))
    return calls


def compare(decode, text: str, evaluates: bool = False, prose: bool = False) -> str | None:
    """None when ours agrees with bfcl_eval on `text`, else why not. With `prose`, ours may read
    as no call (`[]`) a text bfcl_eval fails on: both end the turn, nothing runs."""
    ours = decode_official(text)
    if isinstance(ours, ParseError) and is_evaluation_error(ours):
        return None if evaluates else f"ours says it would evaluate: {ours}"
    try:
        theirs = decode(text)
    except Exception:  # noqa: BLE001 - any failure of bfcl_eval's decoder is a decode failure
        agree = isinstance(ours, ParseError) or (prose and ours == [])
        return None if agree else f"bfcl_eval fails, ours gives {ours}"
    if evaluates:
        return f"bfcl_eval evaluates, ours gives {ours}"
    expected = _bfcl_calls(theirs)
    if expected == "unreadable":
        return None if isinstance(ours, ParseError) else f"bfcl_eval cannot run {theirs}, ours {ours}"
    if isinstance(ours, ParseError):
        return f"bfcl_eval decodes {theirs}, ours: {ours}"
    if expected == "executes":
        return f"bfcl_eval would execute a nested call in {theirs}, ours gives {ours}"
    got = [(c.name, dict(c.args)) for c in ours]
    if len(got) != len(expected) or not all(
            n == m and _same(a, b) for (n, a), (m, b) in zip(got, expected)):
        return f"bfcl_eval {expected}, ours {got}"
    if [official_call_string(c) for c in ours] != theirs and all("{" not in s for s in theirs):
        return f"renderings differ: {theirs} vs {[official_call_string(c) for c in ours]}"
    return None


def _write(name: str, items: list[str]) -> str:
    return f"{name}({', '.join(items)})"


def _args(call: ToolCall) -> list[str]:
    return [f"{k}={v!r}" for k, v in call.args.items()]


def perturbations(calls: tuple[ToolCall, ...], rng: random.Random) -> list[tuple[str, str, bool]]:
    """(kind, text, whether bfcl_eval evaluates part of it) for one ground-truth call list."""
    listed = "[" + ", ".join(c.to_python() for c in calls) + "]"
    first, rest = calls[0], [c.to_python() for c in calls[1:]]
    out = [("fence", f"```\n{listed}\n```", False), ("fence_python", f"```python\n{listed}\n```", False),
           ("quotes", f"'{listed}'", False), ("no_brackets", listed[1:-1], False),
           ("no_closing", listed[:-1], False), ("spaces", f"  \n{listed}\n ", False),
           ("tuple_list", "(" + listed[1:-1] + ("," if len(calls) == 1 else "") + ")", False),
           ("prose", f"I will call {listed}", False)]
    items = _args(first)
    if items:
        values = [repr(v) for v in first.args.values()]
        out.append(("positional", "[" + ", ".join([_write(first.name, values), *rest]) + "]", False))
        out.append(("positional_mixed",
                    "[" + ", ".join([_write(first.name, values[:1] + items[1:]), *rest]) + "]", False))
    for key, value in first.args.items():
        replaced = {"bare": value if isinstance(value, str) and value.isidentifier() else None,
                    "tuple": repr(tuple(value)) if isinstance(value, list) else None,
                    "binop": "2 + 3", "nested_kw": "pwd(path='x')", "nested_plain": "pwd()",
                    "unary_plus": "+5", "ellipsis": "...", "subscript": "x[1:2]", "empty_dict": "{}",
                    "dict_of_dicts": "{'k': {'a': 1}}", "dict_int_keys": "{1: 'a', 2: (3, 4)}",
                    "lambda": "lambda: 1", "set": "{1, 2}", "fstring": "f'{x}'"}
        kinds = [k for k, v in replaced.items() if v is not None]
        for kind in rng.sample(kinds, 3) + (["tuple"] if replaced["tuple"] else []):
            new = [f"{k}={replaced[kind] if k == key else repr(v)}" for k, v in first.args.items()]
            out.append((kind, "[" + ", ".join([_write(first.name, new), *rest]) + "]",
                        kind in ("binop", "nested_kw", "dict_of_dicts")))
        break
    return out


def test_official_decoding_matches_bfcl_eval_on_every_ground_truth(bfcl_decode):
    rng = random.Random(0)
    cases = agreements = 0
    disagreements = []
    for category in CATEGORIES:
        for task in load_tasks(category):
            for texts, calls in zip(task.ground_truth_text, task.ground_truth):
                if not calls:
                    continue
                written = [("ground_truth", "[" + ", ".join(texts) + "]", False)]
                for kind, text, evaluates in written + perturbations(calls, rng):
                    cases += 1
                    problem = compare(bfcl_decode, text, evaluates)
                    if problem is None:
                        agreements += 1
                    else:
                        disagreements.append((task.id, kind, text[:200], problem[:300]))
    assert cases > 10_000
    assert not disagreements, (f"{len(disagreements)} of {cases}", disagreements[:10])


def test_single_turn_official_decoding_matches_bfcl_evals_ast_decoding():
    """`decode_official_ast` against bfcl_eval's `default_decode_ast_prompting` on every
    single-turn AST entry's ground truth written as a model would, and the perturbations above:
    the same calls with the same value types, or a failure on both sides; only arithmetic, which
    bfcl_eval evaluates, is refused here alone."""
    decode = _bfcl_decoders().default_decode_ast_prompting
    rng = random.Random(0)
    cases, disagreements = 0, []
    for category in bfcl_single.NON_LIVE_AST + bfcl_single.LIVE_AST:
        for task in bfcl_single.load_tasks(category):
            calls = ground_truth(task)
            listed = "[" + ", ".join(c.to_python() for c in calls) + "]"
            for kind, text, _ in [("ground_truth", listed, False), *perturbations(calls, rng)]:
                cases += 1
                ours = decode_official_ast(text)
                try:
                    theirs = decode(text)
                except Exception:  # noqa: BLE001 - any failure of bfcl_eval's decoder
                    theirs = None
                if kind == "binop":
                    agree = isinstance(ours, ParseError) and is_evaluation_error(ours)
                elif theirs is None or isinstance(ours, ParseError):
                    agree = theirs is None and isinstance(ours, ParseError)
                else:
                    agree = _same([{c.name: dict(c.args)} for c in ours], theirs)
                if not agree:
                    disagreements.append((task.id, kind, text[:200], ours, theirs))
    assert cases > 25_000
    assert not disagreements, (f"{len(disagreements)} of {cases}", disagreements[:10])


@pytest.mark.parametrize("text,expected", [
    ("[f(a=(1, [2, (3,)]))]", [ToolCall("f", {"a": (1, [2, (3,)])})]),
    ("f(1, 2, a=x)", [ToolCall("f", {"a": "x"})]),                       # positional dropped
    ("[f(a=+5, b=~3, c=-True, d=...)]", [ToolCall("f", {"a": -5, "b": -3, "c": -1, "d": "..."})]),
    ("[f(a=x[1, 2], b=g(1, y))]", [ToolCall("f", {"a": "x[(1, 2)]", "b": "g(1, y)"})]),
    ("[f(a={1: 'x', (1, 2): [g(k=1)]})]",
     [ToolCall("f", {"a": {"1": "x", "(1, 2)": [{"g": {"k": 1}}]}})]),
    ("```\nf(a=1)\n```", [ToolCall("f", {"a": 1})]),
    ("x.y(a=1)", [ToolCall("x.y", {"a": 1})]),
    ("", []), ("[]", []), ("I moved the file.", []),
])
def test_official_values(bfcl_decode, text, expected):
    calls = decode_official(text)
    assert calls == expected
    assert all(_same(dict(c.args), dict(e.args)) for c, e in zip(calls, expected))
    assert compare(bfcl_decode, text, prose=not expected) is None


@pytest.mark.parametrize("text,evaluates", [
    ("[f(a=2 + 3)]", True), ("[f(a=g(b=1))]", True), ("[f(a={'k': {}})]", True),
    ("[f(a={})]", False), ("[f(a=lambda: 1)]", False), ("'[f(a=1)]'", False),
    ("```python\n[f(a=1)]\n```", False), ("[f(a=1)][0]", False), ("[f(a={1, 2})]", False),
    ("[f(a=-'x')]", False), ("[f(a=b'x')]", False), ("[f(a=1e999)]", False),
    ("[f(a='" + "x" * 20_000 + "')]", False),
])
def test_official_rejections(bfcl_decode, text, evaluates):
    result = decode_official(text)
    assert isinstance(result, ParseError) and is_evaluation_error(result) == evaluates, result
    if evaluates:
        assert "seetjax never evaluates model text" in result.message


@pytest.mark.parametrize("text,evaluates", [
    # `**x` is bfcl_eval's keyword None: it renders `f(None=...)`, which its executor cannot run.
    ("[f(**{'a': 1})]", False), ("[f(a=1, **{'b': 2})]", False),
    # Dict keys rendered into the call string: a quote ends the string, a `#` comments out the
    # rest, and the executor runs what is left.
    ("[f(a={\"k': 1}) # \": 2})]", False), ("[f(a={\"k') # \": 1})]", False),
    ("[f(a={'x': 1, \"y': 2}, b=3) # \": 0})]", False),
    ("[f(a={\"k': 1}), g(b=2) # \": 1})]", True), ("[f(a={\"k': g(c=1)}) # \": 1})]", True),
    ("[f(a={\"k': 1}, **{'b': 2}) # \": 1})]", True),
    # Non-string keys below the top level are repr'd, so they stay as they are.
    ("[f(a=[{1: 'x'}])]", False), ("[f(a=({1: 'x'}, {(1, 2): [3]}))]", False),
    ("[f(a=[{None: 1, True: 2, 1.5: 3, (1, (2,)): 4}])]", False),
    ("[f(a={'k': [{1: {2: 'x'}}]}, b=[{(1,): ()}])]", False),
    # Fenced, with values of every shape.
    ("```\n[f(a={'k': [1, (2, {3: 'x'})]}, b=(1, [2]), c={'d': None})]\n```", False),
    ("```\nf(a=[{1: 2}]), g(b=({'x': (1,)},))\n```", False), ("```\nf (a=[{1: 2}])\n```", False),
    ("``` f(a={'k': {'j': [1]}}) ```", True), ("```\n[f(a=1j)]\n```", False),
    ("```\nf (a=1j)\n```", False), ("```\nf (a='" + "x" * 20_000 + "')\n```", False),
])
def test_official_matches_bfcl_eval_on_renderings_and_keys(bfcl_decode, text, evaluates):
    """What bfcl_eval's executor runs is the rendered call string: `decode_official` reads that
    string, not the values it was rendered from. Complex numbers and values past the bounds are
    refused (a ParseError, never no call)."""
    problem = compare(bfcl_decode, text, evaluates)
    if problem is not None and ("1j" in text or "x" * 100 in text):
        assert isinstance(decode_official(text), ParseError), text
    else:
        assert problem is None, problem


def test_official_calls_render_in_every_format():
    calls = decode_official("[f(a=[{(1, 2): 'x', 3: (4,)}], b=({None: True},))]")
    assert calls == [ToolCall("f", {"a": [{"(1, 2)": "x", "3": [4]}], "b": [{"None": True}]})]
    assert parse_tool_calls(calls[0].to_hermes()) == calls
    again = decode_official(f"[{calls[0].to_python()}]")  # BFCL's form: the keys as they were
    assert again == calls and _same(dict(again[0].args), dict(calls[0].args))


def test_official_never_raises_on_hostile_text():
    hostile = ["[" * 500 + "]" * 500, "[f(a=" + "(" * 300 + ")" * 300 + ")]", "\x00", "[f(a='\ud800')]",
               "[f(a=" + "9" * 5000 + ")]", "[f(**{'a': open('x')})]", "[f(a=__import__('os'))]",
               "[f(a={'k': " * 40 + "1" + "}" * 40 + ")]", None, 5, "[f(a=[" + "1, " * 2000 + "])]"]
    for text in hostile:
        result = decode_official(text)
        assert isinstance(result, (list, ParseError))


def test_lenient_parser_keeps_tuples():
    [call] = parse_python_calls("[f(a=(1, 2), b=[(3,)])]")
    assert _same(dict(call.args), {"a": (1, 2), "b": [(3,)]})
    assert call == ToolCall("f", {"a": [1, 2], "b": [[3]]})  # the canonical form lists them


def test_env_official_decoding():
    with pytest.raises(ValueError, match="decoding"):
        BfclEnvConfig(decoding="strict")
    with pytest.raises(ValueError, match="python call format"):
        BfclEnvConfig(prompt_style="native", decoding="official")
    task = load_tasks("base")[0]
    gt = task.ground_truth[0]
    positional = "[" + ", ".join(_write(c.name, [repr(v) for v in c.args.values()]) for c in gt) + "]"
    for decoding, code in (("lenient", "CLEAN_CALL"), ("official", "EXECUTION_ERROR")):
        env = BfclEnv(BfclEnvConfig(decoding=decoding))
        env.reset(task)
        assert env.step(positional).code.name == code  # bfcl_eval drops positional arguments
    env = BfclEnv(BfclEnvConfig(decoding="official"))
    env.reset(task)
    assert env.step("[" + ", ".join(c.to_python() for c in gt) + "]").code.name == "CLEAN_CALL"
    assert env.step("[ls(a=2 + 3)]").code.name == "FORMAT_ERROR"
