"""The dialog data model: validation naming the field, JSONL I/O, task types, lexical diversity."""

import json

import pytest

from seetjax.data.dialogs import (
    MANY_TOOLS,
    Dialog,
    derive_task_type,
    lexical_diversity,
    num_calls,
    read_jsonl,
    type_counts,
    user_turns,
    write_jsonl,
)

TOOL = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def dialog(*turns, tools=(TOOL,), **metadata):
    """A dialog from turns, each a list of the assistant's call lists (then a closing text)."""
    messages = [{"role": "system", "content": "You are an agent."}]
    for t, steps in enumerate(turns):
        messages.append({"role": "user", "content": f"request {t}"})
        for calls in steps:
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            messages += [{"role": "tool", "name": c["function"]["name"], "content": "ok"}
                         for c in calls]
        messages.append({"role": "assistant", "content": "Done."})
    return Dialog(id="d", messages=messages, tools=list(tools), metadata=metadata)


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(id=""), "'id'"),
    (lambda d: d.update(messages=[]), "'messages'"),
    (lambda d: d["messages"][1].update(role="robot"), "'role'"),
    (lambda d: d["messages"][1].update(content=3), "'content'"),
    (lambda d: d["messages"][2]["tool_calls"][0]["function"].pop("name"), "'name'"),
    (lambda d: d["messages"][2]["tool_calls"][0]["function"].update(arguments="{bad"), "'arguments'"),
    (lambda d: d["messages"][2]["tool_calls"][0]["function"].update(arguments="[1]"), "'arguments'"),
    (lambda d: d["messages"].insert(1, {"role": "tool", "content": "x"}), "tool result"),
    (lambda d: d["messages"][1].update(tool_calls=[]), "'tool_calls'"),
    (lambda d: d["metadata"].update(task_type="chat"), "task_type"),
    (lambda d: d["metadata"].update(loss="high"), "loss"),
    (lambda d: d.update(extra=1), "unknown fields ['extra']"),
])
def test_validation_names_the_field(change, field):
    record = dialog([[call("ls")]]).to_json()
    change(record)
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Dialog.from_json(record)


def test_no_assistant_message_is_an_error():
    with pytest.raises(ValueError, match="no assistant message"):
        Dialog("x", [{"role": "user", "content": "hi"}])


def test_arguments_as_json_text_and_null_content_are_accepted():
    d = Dialog("x", [{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"function": {"name": "ls", "arguments": '{"a": 1}'}}]},
                     {"role": "tool", "content": "ok"}])
    assert num_calls(d.messages[1]) == 1


def test_jsonl_round_trip_and_errors(tmp_path):
    dialogs = [dialog([[call("ls", a=1)]], source="x"), dialog([])]
    dialogs[1].id = "d2"
    path = tmp_path / "d.jsonl"
    assert write_jsonl(dialogs, path) == 2
    assert [d.to_json() for d in read_jsonl(path)] == [d.to_json() for d in dialogs]
    path.write_text(path.read_text() + '{"id": "z", "messages": [{"role": "user"}]}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:3: dialog 'z', message 0: field 'content'"):
        read_jsonl(path)
    path.write_text(json.dumps(dialogs[0].to_json()) + "\n" + json.dumps(dialogs[0].to_json()))
    with pytest.raises(ValueError, match="appears twice"):
        read_jsonl(path)


def test_task_types_follow_the_documented_rules():
    one = [[call("ls")]]
    many_tools = [TOOL] * MANY_TOOLS
    assert derive_task_type(dialog(one, one)) == "tool_selection"
    assert derive_task_type(dialog(one, tools=many_tools)) == "tool_retrieval"
    assert derive_task_type(dialog(one, [[call("ls")], [call("cd")]])) == "multi_step_planning"
    assert derive_task_type(dialog([[call("ls"), call("cd")]])) == "multi_step_planning"
    assert derive_task_type(dialog(one, [], tools=many_tools)) == "timing_decision"
    # precedence: a turn without calls wins over many calls and many tools
    assert derive_task_type(dialog([[call("ls"), call("cd")]], [], tools=many_tools)) == \
        "timing_decision"
    # tools offered through the system prompt count through metadata
    no_native = dialog(one, tools=(), num_tools_offered=MANY_TOOLS)
    assert derive_task_type(no_native) == "tool_retrieval"
    assert derive_task_type(dialog(one, [], tools=())) == "tool_selection"  # nothing offered
    explicit = dialog(one, task_type="timing_decision")
    assert explicit.task_type == "timing_decision"
    assert type_counts([explicit, dialog(one)]) == {
        "tool_selection": 1, "multi_step_planning": 0, "timing_decision": 1, "tool_retrieval": 0}


def test_calls_written_in_text_count():
    d = Dialog("x", [{"role": "user", "content": "a"},
                     {"role": "assistant", "content": "[ls(a=1), cd(folder='x')]"},
                     {"role": "tool", "content": "ok"}, {"role": "tool", "content": "ok"},
                     {"role": "assistant", "content": "Done."},
                     {"role": "user", "content": "b"}, {"role": "user", "content": "c"},
                     {"role": "assistant", "content": '<tool_call>{"name": "ls", "arguments": {}}'
                                                      '</tool_call>'}],
               metadata={"num_tools_offered": 3})
    assert [num_calls(m) for m in d.messages] == [0, 2, 0, 0, 0, 0, 0, 1]
    assert [len(t) for t in user_turns(d)] == [2, 1]  # consecutive user messages: one turn
    assert d.task_type == "multi_step_planning"


def test_lexical_diversity_is_a_moving_average_type_token_ratio():
    def said(text):
        return Dialog("x", [{"role": "system", "content": "ignored " * 500},
                            {"role": "user", "content": text},
                            {"role": "assistant", "content": "ok"}])

    assert lexical_diversity(said("a b c")) == 1.0  # "a b c ok": all distinct
    assert lexical_diversity(said("a a a")) == 0.5  # 2 types / 4 words
    distinct = " ".join(f"w{i}" for i in range(400))
    assert lexical_diversity(said(distinct)) == 1.0  # no fall with length, unlike the plain TTR
    repeated = " ".join(f"w{i % 10}" for i in range(400))
    assert lexical_diversity(said(repeated)) == pytest.approx(10 / 50, abs=0.01)
