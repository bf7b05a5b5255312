"""bfcl_eval's own single-turn verdicts, for parity tests: its `ast_checker` and its eval
runner's relevance rules (`is_empty_output`), on calls we decoded (never on model text).

bfcl_eval's checker module imports its model registry, which imports every API client it
supports (not installed here); the registry is stubbed with two model names of our own, one per
naming rule: `seetjax-prompting` (dotted names as written) and `seetjax-fc` (underscore_to_dot).
"""

from __future__ import annotations

import copy
import functools
import sys
import types
from collections.abc import Sequence
from typing import Any
from unittest import mock

from bfcl_eval.constants.enums import Language
from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

from seetjax.envs.bfcl.data import data_dir, read_jsonl
from seetjax.envs.bfcl.single_turn import IRRELEVANCE, RELEVANCE, SingleTurnTask
from seetjax.tools.calls import ToolCall

MODELS = {False: "seetjax-prompting", True: "seetjax-fc"}


@functools.cache
def _ast_checker():
    registry = types.ModuleType("bfcl_eval.constants.model_config")
    registry.MODEL_CONFIG_MAPPING = {name: types.SimpleNamespace(underscore_to_dot=fc)
                                     for fc, name in MODELS.items()}
    with mock.patch.dict(sys.modules, {"bfcl_eval.constants.model_config": registry}):
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    return ast_checker


@functools.cache
def _relevance_entry():
    """bfcl_eval's eval-runner function that judges one irrelevance or relevance entry; its
    module imports clients and helpers not installed here (stubbed: none of them is used)."""
    registry = types.ModuleType("bfcl_eval.constants.model_config")
    registry.MODEL_CONFIG_MAPPING = {}
    overrides = types.ModuleType("overrides")
    overrides.final = overrides.override = lambda f: f
    overrides.EnforceOverrides = object
    stubs = {name: mock.MagicMock() for name in ("dotenv", "tree_sitter", "tree_sitter_java",
                                                 "tree_sitter_javascript")}
    with mock.patch.dict(sys.modules, {"bfcl_eval.constants.model_config": registry,
                                       "overrides": overrides, **stubs}):
        from bfcl_eval.eval_checker.eval_runner import _evaluate_single_relevance_entry
        from bfcl_eval.model_handler.utils import default_decode_ast_prompting
    return _evaluate_single_relevance_entry, default_decode_ast_prompting


def bfcl_relevance_verdict(task: SingleTurnTask, text: str) -> dict[str, Any]:
    """bfcl_eval's verdict (`valid`, `error_type`) on a prompting model's raw reply `text` to an
    irrelevance or relevance entry: its eval runner's own function, with the decoder of its
    prompting handlers (`default_decode_ast_prompting`)."""
    evaluate, decode = _relevance_entry()
    handler = types.SimpleNamespace(decode_ast=lambda result, language, has_tool_call_tag:
                                    decode(result, language, has_tool_call_tag))
    verdict = evaluate(handler, task.id, text, {}, MODELS[False], task.bfcl_category)
    return {"valid": verdict["valid"], "error_type": verdict.get("error_type")}


@functools.cache
def possible_answers(bfcl_category: str) -> dict[str, list[dict[str, Any]]]:
    """bfcl_eval's possible answers of a category, read from its file, by entry id."""
    path = data_dir() / "possible_answer" / f"BFCL_v4_{bfcl_category}.json"
    return {a["id"]: a["ground_truth"] for a in read_jsonl(path)}


def bfcl_verdict(task: SingleTurnTask, calls: Sequence[ToolCall], underscore_to_dot: bool = False,
                 answer: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """bfcl_eval's verdict (`valid`, `error_type`) on `calls` as its decoder would give them;
    `answer`: the possible answer in bfcl_eval's form (default: the entry's, from its file)."""
    decoded = [{call.name: copy.deepcopy(dict(call.args))} for call in calls]
    if task.category in IRRELEVANCE:
        empty = is_empty_output(decoded)
        return {"valid": empty, "error_type": None if empty else "irrelevance_error:decoder_success"}
    if task.category in RELEVANCE:
        empty = is_empty_output(decoded)
        return {"valid": not empty, "error_type": "relevance_error:decoder_failed" if empty else None}
    assert is_function_calling_format_output(decoded)
    answer = copy.deepcopy(answer or possible_answers(task.bfcl_category)[task.id])
    return _ast_checker()(copy.deepcopy(list(task.docs)), decoded, answer, Language.PYTHON,
                          task.bfcl_category, MODELS[underscore_to_dot])
