"""BFCL ground truth -> dialogs: real tool results, closings, reports, and the tokens trained on."""

import numpy as np
import pytest

from seetjax.data.bfcl_dialogs import Closings, bfcl_dialogs
from seetjax.data.dialogs import Dialog, num_calls, read_jsonl, tool_calls, write_jsonl
from seetjax.data.formatter import format_dialog
from seetjax.envs.bfcl.data import load_tasks
from seetjax.tools.calls import ToolCall, parse_tool_calls


def task(category, index):
    return load_tasks(category)[index]


def convert(*tasks, **kwargs):
    dialogs, report = bfcl_dialogs(tasks=tasks, **kwargs)
    return dialogs, report


def test_ground_truth_replays_with_real_tool_results():
    t = task("base", 0)
    (d,), report = convert(t)
    assert report.converted == 1 and not report.failed
    assert d.id == "bfcl/native/multi_turn_base_0" and d.tools  # native: docs in `tools`
    assert d.metadata["num_tools_offered"] == len(t.docs)
    # the same calls run on fresh instances of the scenario give the same outputs
    executor = t.new_executor()
    expected = [executor.execute(c).output for turn in t.ground_truth for c in turn]
    assert [m["content"] for m in d.messages if m["role"] == "tool"] == expected
    made = [ToolCall(f["name"], f["arguments"]) for m in d.messages for f in tool_calls(m)]
    assert made == [c for turn in t.ground_truth for c in turn]
    # one call per assistant message, each turn closed by a message without calls
    assert all(num_calls(m) in (0, 1) for m in d.messages)
    closings = [m["content"] for m in d.messages if m["role"] == "assistant" and not num_calls(m)]
    assert closings == [Closings().done] * t.num_turns
    assert [m["content"] for m in d.messages if m["role"] == "user"] == \
        [m["content"] for turn in t.turns for m in turn]


def test_turns_without_calls_get_their_closing_and_revealed_tools_a_user_message():
    func, param = task("miss_func", 0), task("miss_param", 0)
    (d_func, d_param), _ = convert(func, param)
    closings = Closings()

    def closing_texts(d):
        return [m["content"] for m in d.messages if m["role"] == "assistant" and not num_calls(m)]

    assert closing_texts(d_func) == [closings.done if gt else closings.missing_function
                                     for gt in func.ground_truth]
    assert closing_texts(d_param) == [closings.done if gt else closings.missing_parameter
                                      for gt in param.ground_truth]
    revealed = [d["name"] for docs in func.held_out.values() for d in docs]
    assert not {t["function"]["name"] for t in d_func.tools} & set(revealed)
    assert any(revealed[0] in m["content"] for m in d_func.messages if m["role"] == "user")
    assert d_func.task_type == d_param.task_type == "timing_decision"


def test_a_task_that_does_not_replay_is_reported_not_written():
    dialogs, report = convert(task("miss_func", 49), task("base", 1))
    assert [d.metadata["task_id"] for d in dialogs] == ["multi_turn_base_1"]
    assert list(report.failed) == ["multi_turn_miss_func_49"]
    assert "tail" in report.failed["multi_turn_miss_func_49"]
    assert "1 dialogs converted, 1 tasks left out" in str(report)


def test_parallel_calls_and_the_python_call_format(tmp_path):
    t = task("base", 2)
    (d,), _ = convert(t, prompt_style="bfcl", parallel_calls=True)
    assert d.messages[0]["role"] == "system" and not d.tools
    assistant = [m["content"] for m in d.messages if m["role"] == "assistant"]
    with_calls = [parse_tool_calls(text, "python") for text in assistant
                  if parse_tool_calls(text, "python")]
    assert with_calls == [list(turn) for turn in t.ground_truth if turn]
    path = tmp_path / "d.jsonl"
    write_jsonl([d], path)
    assert read_jsonl(path)[0].to_json() == d.to_json()


def test_the_trained_tokens_are_the_ground_truth_calls(tokenizer):
    """Converter -> chat template -> loss mask: decoding the trained tokens of each assistant
    message gives back its calls, and nothing else is trained."""
    t = task("base", 3)
    (d,), _ = convert(t)
    example = format_dialog(d, tokenizer)
    mask = example.loss_mask.astype(bool)
    # trained spans: maximal runs of mask 1, one per assistant message
    edges = np.flatnonzero(np.diff(np.r_[0, mask.astype(int), 0]))
    spans = [tokenizer.decode(example.tokens[a:b]) for a, b in zip(edges[::2], edges[1::2])]
    assistant = [m for m in d.messages if m["role"] == "assistant"]
    assert len(spans) == len(assistant)
    for text, m in zip(spans, assistant):
        assert text.endswith("<|im_end|>")
        calls = parse_tool_calls(text.removesuffix("<|im_end|>"), "hermes")
        assert calls == [ToolCall(f["name"], f["arguments"]) for f in tool_calls(m)]
        if not calls:
            assert text == m["content"] + "<|im_end|>"


def test_dialog_metadata_records_the_conversion():
    (d,), _ = convert(task("long_context", 5), prompt_style="compact", call_format="hermes")
    assert d.metadata == {"source": "bfcl", "task_id": "multi_turn_long_context_5",
                          "category": "long_context", "prompt_style": "compact",
                          "call_format": "hermes", "parallel_calls": False,
                          "num_tools_offered": len(task("long_context", 5).docs)}
    assert isinstance(Dialog.from_json(d.to_json()), Dialog)
    with pytest.raises(ValueError, match="prompt_style"):
        convert(task("base", 0), prompt_style="chatty")
