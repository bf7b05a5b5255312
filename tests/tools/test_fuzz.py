"""Fuzzing the environment with hostile and random assistant messages (10k cases in all).

Every hostile message (code injection, attribute and dunder access, huge literals, deep nesting,
unicode tricks, bad arguments) must come back as a clear error observation; no message may raise,
touch the file system, or change anything outside the episode.
"""

import copy
import decimal
import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seetjax.envs.base import StepCode
from seetjax.envs.bfcl.checker import state_differences
from seetjax.envs.bfcl.data import load_tasks, new_instances
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig

FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

# A scenario with the file system, math, messaging and tickets.
TASK = next(t for t in load_tasks("base")
            if {"GorillaFileSystem", "MathAPI"} <= set(t.involved_classes))
TOOLS = sorted(TASK.schemas)


@pytest.fixture(scope="module")
def marker(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "pwned"
    yield str(path)
    assert not os.path.exists(path), "a payload created the marker file"


def _injections(m: str) -> list[str]:
    """Payloads that would create the marker file if model text were ever evaluated."""
    return [
        f"__import__('os').system('touch {m}')",
        f"[__import__('os').system('touch {m}')]",
        f"[open('{m}', 'w').write('x')]",
        f"[cd(folder=__import__('os').system('touch {m}'))]",
        f"[eval(\"open('{m}', 'w')\")]",
        f"[exec(\"open('{m}', 'w').close()\")]",
        f"[getattr(cd, '__globals__')['os'].system('touch {m}')]",
        f"[cd.__globals__['os'].system('touch {m}')]",
        f"[().__class__.__bases__[0].__subclasses__()[0]('{m}')]",
        f"[__builtins__.open('{m}', 'w')]",
        f"[(lambda: open('{m}', 'w'))()]",
        f"[lambda: open('{m}', 'w')]",
        f"[ls(a=[x for x in open('{m}', 'w')])]",
        f"[ls(a=open('{m}', 'w'))]",
        f"[ls(a=f\"{{open('{m}', 'w')}}\")]",
        f"[ls(**{{'a': open('{m}', 'w')}})]",
        f"[breakpoint()]\n[open('{m}', 'w')]",
        '<tool_call>{"name": "__import__", "arguments": {"name": "os"}}</tool_call>',
        f'<tool_call>{{"name": "system", "arguments": {{"command": "touch {m}"}}}}</tool_call>',
        f'<tool_call>{{"name": "os.system", "arguments": {{"command": "touch {m}"}}}}</tool_call>',
        f'[{{"name": "exec", "arguments": {{"source": "open(\'{m}\', \'w\')"}}}}]',
        "[_load_scenario(scenario={}, long_context=True)]",
        "[__init__()]", "[__class__()]", "[__reduce__()]", "[__dict__()]",
        f"[rm(file_name='../../../{m}')]",
        "[power(base=10, exponent=10**100)]",
        "[power(base=10, exponent=100000000000000)]",
        "[square_root(number=2, precision=1000000000)]",
        "[logarithm(value=2, base=10, precision=999999999)]",
        "[round_number(number=1, decimal_places=-10000000000)]",
        "[add(a=" + "9" * 5000 + ", b=1)]",
        "[add(a=1e999, b=1)]",
        "[ls(a=" + "[" * 300 + "]" * 300 + ")]",
        "[ls(a=" + "(" * 100 + ")" * 100 + ")]",
        '<tool_call>{"name": "ls", "arguments": {"a": ' + "[" * 50_000 + "]" * 50_000 + "}}</tool_call>",
        '<tool_call>{"name": "ls", "arguments": {"a": 1e999}}</tool_call>',
        "[ｌｓ(ａ=True, ｂ=1)]",  # NFKC folds these to ls(a=True, b=1): an unknown argument
        "[café(x='ü')]", "[\u202els(a=True)]", "[ls(a=\x00)]", "[ls(a='\ud800') ]",
        "[" + "cd(folder='no_such_dir'), " * 3000 + "]",
    ]


_NOT_TOOLS = ["eval", "exec", "open", "system", "getattr", "__import__", "__builtins__",
              "__class__", "__subclasses__", "globals", "vars", "_load_scenario", "_random",
              "breakpoint", "input", "exit", "help", "ｅｖａｌ", "café", "ls_", "cd__"]
_EDGE_VALUES = [10**300, -(10**200), 2**63, 1e308, -0.0, float("nan"), float("inf"), True, None,
                "\ud7ff\u202e\x00", "'; import os; '", "\\", "__class__", "", "é" * 50]
_LETTERS = "abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _ident(rng: random.Random) -> str:
    # No BFCL tool or parameter name ends with "_": these are never real names.
    return "a" + "".join(rng.choices(_LETTERS, k=rng.randrange(10))) + "_"


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 3 else 7)
    if kind == 0:
        return rng.choice(_EDGE_VALUES)
    if kind == 1:
        return rng.randrange(-(2**64), 2**64)
    if kind == 2:
        return rng.uniform(-1e9, 1e9)
    if kind in (3, 4):
        return "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(12)))
    if kind in (5, 6):
        return rng.choice([None, True, False, 0, -1])
    if kind == 7:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_ident(rng): _value(rng, depth + 1) for _ in range(rng.randrange(3))}


def hostile_call(seed: int) -> str:
    """A call that cannot succeed: an unknown or forbidden name, or a real tool with an argument
    it does not have, in the python or the hermes format."""
    rng = random.Random(seed)
    args = {_ident(rng): _value(rng) for _ in range(rng.randrange(3))}
    if rng.random() < 0.5:
        name = rng.choice(_NOT_TOOLS + [_ident(rng)])
    else:
        name = rng.choice(TOOLS)
        args[_ident(rng)] = _value(rng)
    if rng.random() < 0.5:
        return f"<tool_call>{json.dumps({'name': name, 'arguments': args}, default=str)}</tool_call>"
    return "[" + name + "(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")]"


def _check_error(env: BfclEnv, text: str) -> None:
    if env.done:
        env.reset(TASK)
    result = env.step(text)
    assert result.code in (StepCode.FORMAT_ERROR, StepCode.EXECUTION_ERROR), (text[:200], result.code)
    assert result.observations and all(
        o["content"].startswith(("Error", '{"error"')) for o in result.observations), result
    assert all(not r.ok for r in result.results)


@pytest.fixture(scope="module")
def env():
    # Format errors keep the turn open and the step limit is out of reach, so one episode takes
    # every case and each case gets its own observation.
    environment = BfclEnv(BfclEnvConfig(call_format="auto", format_error_ends_turn=False,
                                        max_steps_per_turn=10**9))
    environment.reset(TASK)
    return environment


@pytest.fixture(scope="module", autouse=True)
def nothing_leaks_outside_the_episode():
    cwd, environ, precision = os.getcwd(), dict(os.environ), decimal.getcontext().prec
    pristine = new_instances(TASK.involved_classes, TASK.initial_config, TASK.long_context)
    snapshot = copy.deepcopy(pristine)
    yield
    environ_now = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    environ.pop("PYTEST_CURRENT_TEST", None)
    assert (os.getcwd(), environ_now, decimal.getcontext().prec) == (cwd, environ, precision)
    fresh = new_instances(TASK.involved_classes, TASK.initial_config, TASK.long_context)
    assert state_differences(fresh, snapshot) == [] and state_differences(pristine, snapshot) == []


def test_known_injections(env, marker):
    for text in _injections(marker):
        _check_error(env, text)


@settings(FUZZ, max_examples=5000)
@given(seed=st.integers(0, 2**32), injection=st.integers(0, 3))
def test_hostile_calls_become_error_observations(env, marker, seed, injection):
    # Generation is plain Python seeded by hypothesis: drawing structured values through
    # hypothesis costs more than the environment step it tests.
    payloads = _injections(marker)
    text = hostile_call(seed) if injection else payloads[seed % len(payloads)]
    _check_error(env, text)


_PIECES = list("[](){}<>'\"=,._:\n \\") + ["<tool_call>", "</tool_call>", "__", "cd(", "ls(",
                                          '{"name": ', '"arguments": ', "```", "True", "None"]


def arbitrary_text(seed: int) -> str:
    """Up to 40 pieces: call syntax fragments and characters from anywhere in Unicode."""
    rng = random.Random(seed)
    pieces = []
    for _ in range(rng.randrange(41)):
        if rng.random() < 0.5:
            pieces.append(rng.choice(_PIECES))
        else:
            code = rng.choice([rng.randrange(32, 127), rng.randrange(0x110000)])
            pieces.append(chr(code if not 0xD800 <= code < 0xE000 else 0xFFFD))
    return "".join(pieces)


@settings(FUZZ, max_examples=5000)
@given(seed=st.integers(0, 2**32))
def test_arbitrary_text_never_raises(env, marker, seed):
    text = arbitrary_text(seed)
    if env.done:
        env.reset(TASK)
    result = env.step(text)
    if result.code is StepCode.NO_CALL:
        assert result.turn_ended and not result.calls
    else:
        assert result.observations or result.done
