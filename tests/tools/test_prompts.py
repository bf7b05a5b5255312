"""Prompt renderings: BFCL's system prompt exactly, native tools, compact signatures."""

import copy
import json
import sys
from unittest import mock

from seetjax.envs.bfcl.data import load_tasks
from seetjax.models.tokenizer import train_bpe_tokenizer
from seetjax.tools import prompts


def _bfcl_model_handler_utils():
    # bfcl_eval's prompt code sits in a module that imports API-client and tree-sitter packages we
    # do not install; none of them is used by the functions compared here.
    stubs = {name: mock.MagicMock() for name in
             ("tenacity", "tree_sitter", "tree_sitter_java", "tree_sitter_javascript")}
    with mock.patch.dict(sys.modules, stubs):
        from bfcl_eval.model_handler import utils
    return utils


def test_bfcl_system_prompt_is_bfcls_own():
    utils = _bfcl_model_handler_utils()
    for task in (load_tasks("base")[0], load_tasks("miss_func")[3], load_tasks("long_context")[7]):
        expected = utils.system_prompt_pre_processing_chat_model(
            copy.deepcopy(list(task.turns[0])), copy.deepcopy(list(task.docs)), task.id)
        assert prompts.with_system_prompt(task.turns[0], prompts.bfcl_system_prompt(task.docs)) == expected
    system = prompts.with_system_prompt([{"role": "system", "content": "Be brief."}], "S")
    assert system == [{"role": "system", "content": "S\n\nBe brief."}]


def test_native_tools_use_json_schema_types_and_render_in_the_chat_template():
    task = load_tasks("base")[0]
    tools = prompts.native_tools(task.docs)
    assert len(tools) == len(task.docs) and all(t["type"] == "function" for t in tools)
    types = {spec["type"] for t in tools for spec in t["function"]["parameters"]["properties"].values()}
    assert types <= {"string", "integer", "number", "boolean", "array", "object"}
    assert all(t["function"]["parameters"]["type"] == "object" for t in tools)
    assert task.docs[0]["parameters"]["type"] == "dict"  # the docs themselves are untouched
    tokenizer = train_bpe_tokenizer(["a tiny corpus for a tiny tokenizer"] * 4, 300)
    text = tokenizer.chat_text(task.turns[0], tools=tools, add_generation_prompt=True)
    rendered = [json.loads(line) for line in text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert rendered == [t["function"] for t in tools]


def test_compact_rendering_is_one_line_per_tool_and_much_shorter():
    task = load_tasks("base")[0]
    lines = prompts.compact_signatures(task.docs).splitlines()
    assert len(lines) == len(task.docs)
    by_name = {line.split("(")[0]: line for line in lines}
    assert by_name["cd"].startswith("cd(folder: str) - ")
    assert by_name["ls"].startswith("ls(a: bool = False)")
    assert "tags: list[str] = []" in by_name["post_tweet"]
    assert len(prompts.compact_system_prompt(task.docs)) * 4 < len(prompts.bfcl_system_prompt(task.docs))
    assert "<tool_call>" in prompts.compact_system_prompt(task.docs, "hermes")


def test_more_functions_message_per_style():
    task = load_tasks("miss_func")[0]
    [docs] = task.held_out.values()
    bfcl = prompts.more_functions_message(docs, "bfcl")
    assert bfcl.startswith(str(list(docs))) and bfcl.endswith(prompts.MORE_FUNCTIONS_MESSAGE)
    native = prompts.more_functions_message(docs, "native").splitlines()
    assert json.loads(native[0])["name"] == "sort" and native[-1] == prompts.MORE_FUNCTIONS_MESSAGE
    assert prompts.more_functions_message(docs, "compact").startswith("sort(file_name: str)")
