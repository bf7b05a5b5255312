"""Reading replies into content and tool calls, and streaming them."""

import json
import random

import pytest

from seetjax.serving.chat import ChatFormat
from seetjax.serving.chat_stream import ContentStream
from seetjax.serving.protocol import ChatCompletionRequest
from tests.serving.servinglib import MODEL_NAME, QUESTION, TOOLS

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def request(**kw):
    return ChatCompletionRequest.model_validate(
        {"model": MODEL_NAME, "messages": [QUESTION], "tools": TOOLS, **kw})


@pytest.fixture(scope="module")
def chat_format(tokenizer):
    return ChatFormat(tokenizer)


@pytest.mark.parametrize("text,content,calls", [
    (CALL, None, [("get_weather", {"city": "Paris"})]),
    ("Sure.\n" + CALL, "Sure.", [("get_weather", {"city": "Paris"})]),
    (" Let me see.\n" + CALL + "\nDone.", " Let me see.\n\nDone.", [("get_weather",
                                                                      {"city": "Paris"})]),
    ("[get_weather(city='Rome')]", None, [("get_weather", {"city": "Rome"})]),
    ('{"name": "get_weather", "arguments": {"city": "Oslo"}}', None,
     [("get_weather", {"city": "Oslo"})]),
    ("It is sunny.", "It is sunny.", []),  # prose
    (" leading space stays", " leading space stays", []),
    ("[get_weather(city=Rome)]", "[get_weather(city=Rome)]", []),  # bare name: does not parse
    ('<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',  # undeclared function
     '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>', []),
    ("[get_weather('Rome', 'x')]", "[get_weather('Rome', 'x')]", []),  # positional: no schema
    ("<tool_call>{broken", "<tool_call>{broken", []),
])
def test_replies_are_read_into_content_and_calls(chat_format, text, content, calls):
    reply = chat_format.reply(request(), text, "stop")
    assert reply.content == content
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
           for c in reply.tool_calls]
    assert got == calls
    assert len({c["id"] for c in reply.tool_calls}) == len(calls)
    assert all(c["id"].startswith("call_") and len(c["id"]) == 29 for c in reply.tool_calls)
    # Streamed in any pieces, the content that goes out is the start of the final content.
    rng = random.Random(len(text))
    for _ in range(5):
        stream, sent, start = ContentStream(True), "", 0
        while start < len(text):
            end = min(len(text), start + rng.randint(1, 6))
            sent += stream.feed(text[start:end])
            start = end
        assert sent + stream.finish(reply.content) == (reply.content or "")


def test_tool_choice_and_limits_decide_whether_calls_are_read(chat_format):
    assert chat_format.reply(request(tool_choice="none"), CALL, "stop").tool_calls == []
    assert chat_format.reply(request(), CALL, "length").content == CALL  # cut: not read
    no_tools = ChatCompletionRequest.model_validate({"model": "m", "messages": [QUESTION]})
    assert chat_format.reply(no_tools, CALL, "stop").content == CALL


def test_forced_calls_take_the_template_form(chat_format, tokenizer):
    assert chat_format.call_parts == ('<tool_call>{"name": "', '", "arguments": ',
                                      '}</tool_call>')
    named = request(tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert chat_format.forced_call(request()) is None
    prompt = chat_format.prompt(named)
    generation = tokenizer.chat_text([QUESTION], TOOLS, add_generation_prompt=True)
    assert prompt.ids == tokenizer.encode(generation)  # the reply is constrained, not opened
    fsm = prompt.constraint
    assert fsm.advance(0, tokenizer.encode(CALL)) >= 0
    assert fsm.advance(0, tokenizer.encode(CALL.replace("get_weather", "get_time"))) < 0
    # A string argument may hold the closing tag: the call is read by its form, not parsed.
    tricky = CALL.replace("Paris", "</tool_call>")
    (call,) = chat_format.reply(named, tricky, "stop").tool_calls
    assert json.loads(call["function"]["arguments"]) == {"city": "</tool_call>"}
    cut = CALL[:CALL.index("Paris")]  # a stop string ended it there
    reply = chat_format.reply(named, cut, "stop")
    assert reply.content == cut and reply.tool_calls == []

