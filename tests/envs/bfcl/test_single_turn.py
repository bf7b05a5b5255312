"""BFCL single-turn tasks: counts per category, possible answers, prompts in every style, replies
read back with dotted and underscored names."""

import copy

import pytest

from seetjax.envs.bfcl import single_turn as bfcl_single
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.tools.calls import ParseError, ToolCall
from seetjax.tools.prompts import PROMPT_STYLES
from tests.tools.test_prompts import _bfcl_model_handler_utils

SIZES = {"simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200,
         "live_simple": 258, "live_multiple": 1053, "live_parallel": 16,
         "live_parallel_multiple": 24, "irrelevance": 240, "live_irrelevance": 884,
         "live_relevance": 16}
HINT = " Note that the provided function is in Python 3 syntax."


def test_each_category_loads_with_its_size_and_possible_answers():
    assert set(SIZES) == set(bfcl_single.CATEGORIES)
    ids = set()
    for category, size in SIZES.items():
        tasks = bfcl_single.load_tasks(category)
        assert len(tasks) == size, category
        ids |= {t.id for t in tasks}
        assert all(t.category == category and t.messages for t in tasks)
        # Four live_irrelevance questions come with no function at all.
        assert sum(not t.docs for t in tasks) == (4 if category == "live_irrelevance" else 0)
        assert all(d["description"].endswith(HINT) for t in tasks for d in t.docs)
        judged_by_answers = category in bfcl_single.NON_LIVE_AST + bfcl_single.LIVE_AST
        assert all(bool(t.answers) == judged_by_answers for t in tasks), category
        if category in ("simple", "live_simple", "multiple", "live_multiple"):
            assert all(len(t.answers) == 1 for t in tasks)
    assert len(ids) == sum(SIZES.values()) == 3491
    task = bfcl_single.load_tasks("simple")[0]
    assert (task.id, task.bfcl_category) == ("simple_python_0", "simple_python")
    assert task.answers[0].name == "calculate_triangle_area"
    assert task.answers[0].choices == {"base": (10,), "height": (5,), "unit": ("units", "")}


def test_load_takes_the_first_tasks_of_each_category_and_names_unknown_ones():
    tasks = bfcl_single.load(["parallel", "live_relevance"], per_category=3)
    assert [t.id for t in tasks] == ["parallel_0", "parallel_1", "parallel_2", "live_relevance_0-0-0",
                                     "live_relevance_1-1-0", "live_relevance_2-2-0"]
    with pytest.raises(ValueError, match=r"categories=\['simple_java', 'nope'\]: not single-turn"):
        bfcl_single.load(["simple", "simple_java", "nope"])


def test_bfcl_style_prompt_is_bfcls_own():
    utils = _bfcl_model_handler_utils()
    config = BfclEnvConfig(prompt_style="bfcl")
    with_system = next(t for t in bfcl_single.load_tasks("live_simple")
                       if t.messages[0]["role"] == "system")
    for task in (bfcl_single.load_tasks("simple")[1], bfcl_single.load_tasks("live_irrelevance")[5],
                 with_system):
        expected = utils.system_prompt_pre_processing_chat_model(
            copy.deepcopy(list(task.messages)), copy.deepcopy(list(task.docs)), task.id)
        assert bfcl_single.opening(task, config) == (expected, None)


@pytest.mark.parametrize("style", PROMPT_STYLES)
def test_every_style_renders_and_reads_back_the_ground_truth(style, tokenizer):
    config = BfclEnvConfig(prompt_style=style)
    task = bfcl_single.load_tasks("simple")[1]  # math.factorial(number=5)
    messages, tools = bfcl_single.opening(task, config)
    assert messages[-1] == task.messages[-1]
    shown = "math_factorial" if style == "native" else "math.factorial"
    assert bfcl_single.underscored_names(config) == (style == "native")
    if style == "native":
        assert messages == list(task.messages) and tools[0]["function"]["name"] == shown
        reply = '<tool_call>{"name": "math_factorial", "arguments": {"number": 5}}</tool_call>'
    else:
        assert tools is None and shown in messages[0]["content"]
        reply = "[math.factorial(5)]"  # the positional value is named through the shown doc
    assert tokenizer.chat_ids(messages, tools, add_generation_prompt=True)
    assert bfcl_single.parse_reply(task, reply, config) == [ToolCall(shown, {"number": 5})]


def test_compact_style_with_hermes_calls_underscores_dotted_names():
    config = BfclEnvConfig(prompt_style="compact", call_format="hermes")
    task = bfcl_single.load_tasks("simple")[1]
    messages, _ = bfcl_single.opening(task, config)
    assert "math_factorial(number: int)" in messages[0]["content"]
    assert isinstance(bfcl_single.parse_reply(
        task, '<tool_call>{"name": "math.factorial", "arguments": {}}</tool_call>', config),
        ParseError)
    assert task.docs[0]["name"] == "math.factorial"  # the task's own docs are untouched
