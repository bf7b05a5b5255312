"""Hostile literals in model text (seeded, ~12k parses): only ParseError comes back for a bad
message, every parsed call's methods work, no non-finite number or oversized value gets through,
and the `<tool_call>` scan stays linear."""

import json
import math
import random
import time

import pytest

from seetjax.envs.bfcl.data import load_tasks
from seetjax.tools.calls import ParseError, ToolCall, parse_tool_calls
from seetjax.tools.tool_call import MAX_CONTAINER_ITEMS, MAX_INT_DIGITS, MAX_STRING_CHARS

SCHEMAS = load_tasks("base")[0].schemas
PY_PAYLOADS = [
    "0x" + "f" * 3600,  # parses in Python, but its decimal form is past the int-to-str limit
    "-0x" + "a" * 900, "1" * 5000, "9" * (MAX_INT_DIGITS + 1), "1e400", "-1e400",
    "'" + "x" * (MAX_STRING_CHARS + 1) + "'", "[" + "0," * (MAX_CONTAINER_ITEMS + 1) + "]",
    "[" * 40 + "]" * 40, "{'k': " * 30 + "1" + "}" * 30, "(1,)", "{'a': (1, 2)}", "True", "None",
    "1.5", "-7", "'ok'", "[1, [2, [3]]]",
]
JSON_PAYLOADS = [
    "1e400", "-1e999", "NaN", "Infinity", "1" * 5000, "9" * (MAX_INT_DIGITS + 1),
    json.dumps("x" * (MAX_STRING_CHARS + 1)), json.dumps(list(range(MAX_CONTAINER_ITEMS + 1))),
    "[" * 40 + "]" * 40, '{"a": {"b": [1, 2.5, null, true]}}', '"ok"', "0.1", "-3",
]


def _python_messages(payload: str) -> list[str]:
    return [f"[cd(folder={payload})]", f"cd({payload})", f"[{payload}]",
            f"[mkdir(dir_name='a'), touch(file_name={payload})]"]


def _json_messages(payload: str) -> list[str]:
    call = f'{{"name": "cd", "arguments": {{"folder": {payload}}}}}'
    as_string = json.dumps({"name": "cd", "arguments": f'{{"folder": {payload}}}'})
    return [call, f"[{call}]", f"<tool_call>{call}</tool_call>", f"<tool_call>{as_string}</tool_call>"]


def _mutate(text: str, rng: random.Random) -> str:
    """Cuts, duplicates or splices a random slice: broken variants of each message."""
    i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
    choice = rng.randrange(4)
    if choice == 0:
        return text[:i]
    if choice == 1:
        return text[:j] + text[i:j] + text[j:]
    if choice == 2:
        return text[:i] + rng.choice(["<tool_call>", "</tool_call>", "(", "]", "'", '"', "\x00",
                                      "0x", "e999", "\\u0000"]) + text[i:]
    return text[i:]


def _messages(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    base = [m for p in PY_PAYLOADS for m in _python_messages(p)]
    base += [m for p in JSON_PAYLOADS for m in _json_messages(p)]
    return base + [_mutate(rng.choice(base), rng) for _ in range(n - len(base))]


def _values(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            yield item


def _check_call(call: ToolCall) -> None:
    key = call.key()
    assert hash(call) == hash(key) and call == call
    text = call.to_python()
    assert repr(call) == f"ToolCall({text})"
    call.to_hermes()
    for value in _values([dict(call.args), list(call.positional)]):
        if isinstance(value, float):
            assert math.isfinite(value)
        if isinstance(value, int) and not isinstance(value, bool):
            assert len(str(abs(value))) <= MAX_INT_DIGITS
        if isinstance(value, str):
            assert len(value) <= MAX_STRING_CHARS
    if all(name.isidentifier() for name in call.args):  # JSON keys need not be
        again = parse_tool_calls(f"[{text}]", "python", SCHEMAS)
        assert again == [call], (text[:200], again)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hostile_literals_give_parse_errors_or_sound_calls(seed):
    for text in _messages(seed, 1000):
        for fmt in ("python", "hermes", "json", "auto"):
            result = parse_tool_calls(text, fmt, SCHEMAS)
            assert isinstance(result, (list, ParseError)), (fmt, text[:200])
            if isinstance(result, ParseError):
                assert str(result)
            else:
                for call in result:
                    _check_call(call)


@pytest.mark.parametrize("payload,limit", [
    ("0x" + "f" * 3600, "digits"), ("9" * (MAX_INT_DIGITS + 1), "digits"),
    ("'" + "x" * (MAX_STRING_CHARS + 1) + "'", "characters"),
    ("[" + "0," * (MAX_CONTAINER_ITEMS + 1) + "]", "items"), ("1e400", "finite")])
def test_each_bound_is_named_in_the_error(payload, limit):
    for text in (f"[cd(folder={payload})]",
                 f'{{"name": "cd", "arguments": {{"folder": {payload.strip(chr(39))}}}}}'):
        if text.startswith("{") and payload.startswith(("0x", "'", "[")):
            continue  # not JSON syntax
        result = parse_tool_calls(text, "auto", SCHEMAS)
        assert isinstance(result, ParseError) and limit in result.message, (text[:80], result)


def test_calls_built_in_code_are_total_too():
    """ToolCall's methods never raise, whatever values code put in it."""
    huge = 7 ** 6000  # over 4,300 decimal digits
    call = ToolCall("f", {"a": huge, "b": [float("nan"), float("inf")], "c": (huge,)}, (-huge,))
    assert call == ToolCall("f", {"a": huge, "b": [float("nan"), float("inf")], "c": [huge]},
                            (-huge,))
    assert call != ToolCall("f", {"a": huge + 1, "b": [float("nan"), float("inf")], "c": [huge]},
                            (-huge,))
    assert hash(call) and "0x" in call.to_python() and "0x" in repr(call)
    assert isinstance(parse_tool_calls(call.to_python(), "python"), ParseError)


def test_unclosed_tags_are_scanned_in_linear_time():
    """65k characters of `<tool_call>` without a close: an error, found in one scan (the lazy
    regex this replaced took seconds on it). Compared with a message 16x shorter, so the check
    holds on a slow or busy machine: quadratic work would take ~256x longer, linear ~16x."""
    def seconds(n):
        text = "<tool_call>" * n
        start = time.perf_counter()
        result = parse_tool_calls(text, "hermes")
        assert isinstance(result, ParseError) and "unclosed" in result.message
        return time.perf_counter() - start

    short, long = min(seconds(370) for _ in range(5)), min(seconds(5900) for _ in range(5))
    assert long < 64 * max(short, 1e-5)
