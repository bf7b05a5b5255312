"""Safe execution: per-episode instances, resolution, validation, error observations."""

import ast
import decimal
import pathlib

import mpmath
import pytest

import seetjax
from seetjax.envs.bfcl.data import api_class, class_schemas, load_tasks, new_instances
from seetjax.tools.calls import ToolCall
from seetjax.tools.executor import ERROR_PREFIX, ExecutionErrorKind, ToolExecutor, render_output


def executor(*classes, available=None, check_types=True):
    instances = new_instances(classes, {}, long_context=False)
    return ToolExecutor(instances, {c: class_schemas(c) for c in classes}, available, check_types)


def test_episodes_do_not_share_state():
    task = load_tasks("base")[0]
    first, second = task.new_executor(), task.new_executor()
    assert first.execute(ToolCall("mkdir", {"dir_name": "fresh"})).ok
    assert "fresh" in first.execute(ToolCall("ls")).output
    assert "fresh" not in second.execute(ToolCall("ls")).output
    assert first.instances["GorillaFileSystem"] is not second.instances["GorillaFileSystem"]


def test_mutable_defaults_are_fresh_per_call():
    # TwitterAPI.post_tweet defaults `mentions=[]` and `mention` extends a tweet's list in place:
    # called directly, every later tweet of the process would inherit the mentions.
    ex = executor("TwitterAPI")
    ex.execute(ToolCall("authenticate_twitter", {"username": "john", "password": "john123"}))
    tweet = ex.execute(ToolCall("post_tweet", {"content": "hello"}))
    tweet_id = int(tweet.output.split('"id": ')[1].split(",")[0])
    assert ex.execute(ToolCall("mention", {"tweet_id": tweet_id, "mentioned_usernames": ["@a"]})).ok
    other = executor("TwitterAPI")
    other.execute(ToolCall("authenticate_twitter", {"username": "john", "password": "john123"}))
    assert '"mentions": []' in other.execute(ToolCall("post_tweet", {"content": "x"})).output
    signature_default = api_class("TwitterAPI").post_tweet.__defaults__
    assert signature_default == ([], [])


def test_unknown_unavailable_and_private_names():
    ex = executor("GorillaFileSystem", available=["ls", "cd"])
    for name in ("rm_rf", "sort", "_load_scenario", "__init__", "__class__"):
        result = ex.execute(ToolCall(name, {}))
        assert result.error is ExecutionErrorKind.UNKNOWN_FUNCTION
        assert result.output.startswith(ERROR_PREFIX) and "not available" in result.output
    ex.reveal(["sort"])
    assert ex.execute(ToolCall("sort", {"file_name": "x"})).error is not ExecutionErrorKind.UNKNOWN_FUNCTION
    with pytest.raises(ValueError):
        ex.reveal(["no_such_tool"])


def test_only_public_methods_can_be_registered():
    instances = new_instances(["MathAPI"], {}, False)
    bad = class_schemas("MathAPI")[0].__class__.from_doc({"name": "__init__", "parameters": {}})
    with pytest.raises(ValueError, match="no public method"):
        ToolExecutor(instances, {"MathAPI": [bad]})


def test_invalid_arguments_run_nothing():
    ex = executor("GorillaFileSystem")
    before = ex.execute(ToolCall("ls")).output
    result = ex.execute(ToolCall("mkdir", {"dir_name": 5, "mode": "x"}))
    assert result.error is ExecutionErrorKind.INVALID_ARGUMENTS
    assert [e.argument for e in result.argument_errors] == ["mode", "dir_name"]
    assert "unexpected argument 'mode'" in result.output and "must be string" in result.output
    assert ex.execute(ToolCall("ls")).output == before


def test_lenient_types_run_like_bfcl_but_keep_bounds():
    ex = executor("MathAPI", check_types=False)
    assert ex.execute(ToolCall("add", {"a": "1", "b": "2"})).output == '{"result": "12"}'
    result = ex.execute(ToolCall("power", {"base": 10, "exponent": 10**12}))
    assert result.error is ExecutionErrorKind.INVALID_ARGUMENTS


def test_api_errors_and_exceptions_become_observations():
    ex = executor("GorillaFileSystem", "MathAPI")
    missing = ex.execute(ToolCall("cd", {"folder": "nowhere"}))
    assert missing.error is ExecutionErrorKind.API_ERROR and missing.output.startswith('{"error": ')
    empty = ex.execute(ToolCall("mean", {"numbers": []}))
    assert empty.error is ExecutionErrorKind.API_ERROR
    overflow = ex.execute(ToolCall("standard_deviation", {"numbers": [1e308, -1e308, 1e308]}))
    assert overflow.error is ExecutionErrorKind.API_EXCEPTION
    assert overflow.output == ERROR_PREFIX + "(34, 'Numerical result out of range')"
    huge = ex.execute(ToolCall("multiply", {"a": 10**3000, "b": 10**3000}))
    assert huge.error is ExecutionErrorKind.API_EXCEPTION and "cannot be shown" in huge.output


def test_api_exception_is_caught(monkeypatch):
    ex = executor("MathAPI")
    monkeypatch.setattr(ex.instances["MathAPI"], "add", lambda a, b: 1 / 0, raising=False)
    ex = ToolExecutor(ex.instances, {"MathAPI": class_schemas("MathAPI")})
    result = ex.execute(ToolCall("add", {"a": 1, "b": 2}))
    assert result.error is ExecutionErrorKind.API_EXCEPTION
    assert result.output == ERROR_PREFIX + "division by zero"


def test_tools_cannot_change_process_wide_numeric_settings():
    precision, mp_precision = decimal.getcontext().prec, mpmath.mp.prec
    ex = executor("MathAPI")
    assert ex.execute(ToolCall("square_root", {"number": 2, "precision": 60})).ok
    assert ex.execute(ToolCall("logarithm", {"value": 8, "base": 2, "precision": 90})).ok
    assert (decimal.getcontext().prec, mpmath.mp.prec) == (precision, mp_precision)


def test_math_outputs_do_not_depend_on_other_threads():
    """mpmath's precision is process-global: calls at many precisions on 8 threads at once give
    exactly the outputs of one thread, each printed at its own precision as bfcl_eval prints it."""
    import concurrent.futures

    calls = [ToolCall("logarithm", {"value": 2 + i % 7, "base": 3, "precision": 5 + i % 40})
             for i in range(1200)]

    def outputs(chunk):
        ex = executor("MathAPI")
        return [ex.execute(c).output for c in chunk]

    alone = outputs(calls)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        threaded = [o for part in pool.map(outputs, [calls[k::8] for k in range(8)]) for o in part]
    assert [o for k in range(8) for o in alone[k::8]] == threaded
    saved = mpmath.mp.prec
    try:  # calls[0] asks for 5 digits: its output is printed at 5, not at the process's 15
        mpmath.mp.dps = 5
        expected = str({"result": mpmath.log(2) / mpmath.log(3)})
    finally:
        mpmath.mp.prec = saved
    assert alone[0] == expected


def test_outputs_are_rendered_as_bfcl_renders_them():
    assert render_output("text") == "text"
    assert render_output({"a": [1, 2.5], "b": None}) == '{"a": [1, 2.5], "b": null}'
    assert render_output({"a": {1, 2}}) == "{'a': {1, 2}}"  # not JSON-serializable: str()
    assert render_output([1, "x"]) == "[1, 'x']"
    assert render_output(None) == "None"


def test_no_eval_or_exec_anywhere_in_the_package():
    forbidden = {"eval", "exec", "compile", "__import__"}
    package = pathlib.Path(seetjax.__file__).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                builtin = isinstance(func, ast.Name) or (
                    isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "builtins")
                name = getattr(func, "id", getattr(func, "attr", None))
                assert not (builtin and name in forbidden), f"{path}:{node.lineno} calls {name}"
