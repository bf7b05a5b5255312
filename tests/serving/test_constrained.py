"""Constrained decoding: a forced tool choice always yields a call of a declared tool whose
arguments validate against its schema, through the real server; unconstrained rows decoding
beside constrained ones are token-identical to the sampler alone."""

import json

import pytest

from seetjax.serving.chat import ChatFormat
from seetjax.serving.json_grammar import schema_nfa
from seetjax.serving.requests import GenerationParams
from seetjax.serving.token_fsm import compile_fsm
from seetjax.tools.calls import ToolCall
from seetjax.tools.schema import ToolSchema, validate_call
from tests.serving.servinglib import MODEL_NAME, QUESTION, TOOLS, greedy_alone

BOOK = {"type": "function", "function": {"name": "book_table", "parameters": {
    "type": "object",
    "properties": {"place": {"type": "string"}, "guests": {"type": "integer"},
                   "budget": {"type": ["number", "null"]}, "vegan": {"type": "boolean"},
                   "slot": {"enum": ["lunch", "dinner"]},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["place", "guests", "slot"]}}}
LIST = {"type": "function", "function": {"name": "list_files"}}
# Through the server: no array (a taught toy model may list strings until its token limit).
BOOK_SHORT = {"type": "function", "function": {**BOOK["function"], "parameters": {
    **BOOK["function"]["parameters"],
    "properties": {k: v for k, v in BOOK["function"]["parameters"]["properties"].items()
                   if k != "tags"}}}}
FORCED_TOOLS = [BOOK_SHORT, LIST]
QUESTIONS = ["What is the weather in Paris?", "Book a table for two.", "ls", "Hello!",
             "Move report.pdf into docs.", "1 + 1 = ?", "Find a vegan place for dinner.", ""]


@pytest.fixture(scope="module")
def chat_format(tokenizer):
    return ChatFormat(tokenizer)


def accepts(fsm, tokenizer, text: str) -> bool:
    """Whether the automaton takes `text` (as the tokenizer splits it) and then a stop token."""
    state = fsm.advance(0, tokenizer.encode(text))
    return state >= 0 and fsm.table[state, tokenizer.stop_ids[0]] >= 0


def test_the_automaton_takes_exactly_the_valid_json(chat_format, tokenizer):
    fsm = compile_fsm(schema_nfa(BOOK["function"]["parameters"]), chat_format.vocabulary)
    valid = ['{"place": "Rome", "guests": 2, "slot": "lunch"}',
             '{"place":"a\\"b\\u00e9","guests":-10,"budget":null,"slot":"dinner"}',
             '{"place": "", "guests": 0, "budget": 1.5e3, "vegan": true, "slot": "lunch", '
             '"tags": ["a", "b"]}',
             '{"place": "x", "guests": 1, "slot": "lunch", "tags": []}',
             '{"place": "<tool_call></tool_call>", "guests": 1, "slot": "lunch"}']
    invalid = ['{"guests": 2, "place": "Rome", "slot": "lunch"}',  # not the schema's order
               '{"place": "Rome", "slot": "lunch"}',  # a required key missing
               '{"place": "Rome", "guests": 2.5, "slot": "lunch"}',  # not an integer
               '{"place": "Rome", "guests": 02, "slot": "lunch"}',  # not JSON
               '{"place": "Rome", "guests": 2, "slot": "brunch"}',  # not in the enum
               '{"place": "Rome", "guests": 2, "slot": "lunch", "x": 1}',  # unknown key
               '{"place": "Rome", "guests": 2, "slot": "lunch"} ',  # trailing space
               '{"place": "Rome", "guests": 2, "slot": "lunch"']  # not closed
    for text in valid:
        json.loads(text)
        assert accepts(fsm, tokenizer, text), text
    for text in invalid:
        assert not accepts(fsm, tokenizer, text), text


def test_a_json_reply_never_writes_the_templates_own_tokens(chat_format, tokenizer):
    """A response_format reply is JSON alone: the template's markers (<tool_call>, added tokens
    that are not "special") are allowed nowhere in it, though their text still is, in pieces.
    A model once wrote </tool_call> tokens inside a string until the token limit."""
    fsm = chat_format._json_fsm(json.dumps(BOOK["function"]["parameters"]))
    markers = chat_format.template_token_ids
    (close,) = tokenizer.encode("</tool_call>")
    assert close in markers and not set(markers) & set(tokenizer.stop_ids)
    assert (fsm.table[:, markers] == -1).all()
    head, tail = '{"place": "', '", "guests": 1, "slot": "lunch"}'
    spelled = [t for c in "</tool_call>" for t in tokenizer.encode(c)]
    assert close not in spelled
    state = fsm.advance(0, tokenizer.encode(head) + spelled + tokenizer.encode(tail))
    assert state >= 0 and fsm.table[state, tokenizer.stop_ids[0]] >= 0
    # without markers named, the automaton takes the token as the string's characters
    assert accepts(compile_fsm(schema_nfa(BOOK["function"]["parameters"]),
                               chat_format.vocabulary), tokenizer, head + "</tool_call>" + tail)


def test_a_forced_call_writes_the_templates_tokens_only_to_open_and_close_it(chat_format,
                                                                              tokenizer):
    """A forced call opens and closes with the template's own markers, and its string
    arguments can hold their text only spelled in pieces, as in a JSON reply."""
    fsm = chat_format._call_fsm(json.dumps([[0, "book_table", BOOK["function"]["parameters"]]]))
    before_name, after_name, after_args = chat_format.call_parts
    (opening,) = [t for t in tokenizer.encode(before_name) if t in chat_format.template_token_ids]
    (close,) = tokenizer.encode("</tool_call>")
    head = before_name + "book_table" + after_name + '{"place": "'
    tail = '", "guests": 1, "slot": "lunch"}' + after_args
    plain = tokenizer.encode(head) + tokenizer.encode(tail)
    assert opening in plain and close in plain  # the template's tokens open and close it
    state = fsm.advance(0, plain)
    assert state >= 0 and fsm.table[state, tokenizer.stop_ids[0]] >= 0
    inside = fsm.advance(0, tokenizer.encode(head))
    assert inside >= 0 and fsm.table[inside, close] == -1 and fsm.table[inside, opening] == -1
    spelled = [t for c in "</tool_call>" for t in tokenizer.encode(c)]
    state = fsm.advance(inside, spelled + tokenizer.encode(tail))
    assert state >= 0 and fsm.table[state, tokenizer.stop_ids[0]] >= 0


def test_a_schema_reference_is_refused_naming_where():
    with pytest.raises(ValueError, match=r"schema.properties.a.\$ref='#/x'"):
        schema_nfa({"type": "object", "properties": {"a": {"$ref": "#/x"}}})


def check_call(message, allowed: set[str]) -> None:
    (call,) = message.tool_calls
    assert call.function.name in allowed and message.content is None
    arguments = json.loads(call.function.arguments)
    tool = {t["function"]["name"]: t["function"] for t in FORCED_TOOLS}[call.function.name]
    schema = ToolSchema.from_doc({"parameters": {"type": "object", "properties": {}}, **tool})
    assert validate_call(ToolCall(call.function.name, arguments), schema) == []
    if "slot" in arguments:
        assert arguments["slot"] in ("lunch", "dinner")


@pytest.mark.parametrize("choice", ["required",
                                    {"type": "function", "function": {"name": "book_table"}}])
def test_forced_tool_choice_always_gives_a_valid_call(client, choice):
    allowed = {"book_table"} if isinstance(choice, dict) else {"book_table", "list_files"}
    for question in QUESTIONS:
        reply = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": question}],
            tools=FORCED_TOOLS, tool_choice=choice, temperature=0, max_tokens=128)
        (choice_out,) = reply.choices
        assert choice_out.finish_reason == "tool_calls", choice_out.message.content
        check_call(choice_out.message, allowed)


def test_sampled_forced_calls_end_as_valid_calls_or_at_the_limit(client):
    reply = client.chat.completions.create(
        model=MODEL_NAME, messages=[QUESTION], tools=FORCED_TOOLS, tool_choice="required",
        temperature=1.0, seed=7, n=4, max_tokens=48)
    for choice in reply.choices:
        assert choice.finish_reason in ("tool_calls", "length")
        if choice.finish_reason == "tool_calls":
            check_call(choice.message, {"book_table", "list_files"})


def test_unconstrained_rows_beside_constrained_ones_are_unchanged(engine, tokenizer,
                                                                  chat_format):
    from seetjax.serving.protocol import ChatCompletionRequest
    request = ChatCompletionRequest.model_validate(
        {"model": MODEL_NAME, "messages": [QUESTION], "tools": FORCED_TOOLS,
         "tool_choice": {"type": "function", "function": {"name": "book_table"}}})
    forced = chat_format.prompt(request)
    plain = tokenizer.chat_ids([{"role": "user", "content": "Move report.pdf into docs."}],
                               add_generation_prompt=True)
    busy = engine.submit(forced.ids, GenerationParams(max_tokens=64, temperature=1.0, seed=1,
                                                      n=2, constraint=forced.constraint))
    beside = []  # per chunk of the plain row: whether a constrained row decoded with it

    def seen(event):  # on the engine's thread, between chunks: its rows are as decoded
        beside.append(any(c is not None and c.fsm_state >= 0 for c in engine.batch.choices))

    handle = engine.submit(plain, GenerationParams(max_tokens=24, temperature=0.0),
                           on_event=seen)
    out = handle.result(60)
    busy.result(60)
    assert beside and beside[0]
    ref = greedy_alone(engine.sampler, engine.params, plain, 24, tokenizer.stop_ids)
    assert out.choices[0].token_ids == ref.tokens


def test_streamed_forced_arguments_arrive_in_pieces_and_reassemble(client):
    kw = dict(model=MODEL_NAME, messages=[QUESTION], tools=FORCED_TOOLS, temperature=0,
              max_tokens=128, tool_choice={"type": "function", "function": {"name": "book_table"}})
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    pieces = []
    with client.chat.completions.stream(**kw) as stream:  # the official client's accumulator
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                pieces.append(event.arguments_delta)
        final = stream.get_final_completion().choices[0]
    (call,) = final.message.tool_calls
    assert final.finish_reason == "tool_calls" and len(pieces) > 2
    assert (call.function.name, call.function.arguments) == (whole.function.name,
                                                             whole.function.arguments)
    assert "".join(pieces) == call.function.arguments


def test_response_format_json_schema_gives_valid_json(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "sunny": {"type": "boolean"},
                                               "degrees": {"type": "integer"}},
              "required": ["city", "sunny", "degrees"]}
    spec = ToolSchema.from_doc({"name": "answer", "parameters": schema})
    for question in QUESTIONS[:4]:
        reply = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": question}], tools=TOOLS,
            temperature=0, max_tokens=96, response_format={
                "type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
        (choice,) = reply.choices
        assert choice.finish_reason == "stop" and choice.message.tool_calls is None
        answer = json.loads(choice.message.content)
        assert validate_call(ToolCall("answer", answer), spec) == []
    anything = client.chat.completions.create(
        model=MODEL_NAME, messages=[QUESTION], temperature=0, max_tokens=96,
        response_format={"type": "json_object"}).choices[0]
    assert anything.finish_reason == "length" or isinstance(
        json.loads(anything.message.content), dict)


@pytest.mark.parametrize("extra,where", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "a", "schema": {"type": "object", "properties": {"x": {"$ref": "#/y"}}}}}},
     "response_format.json_schema.schema.properties.x.$ref"),
    ({"response_format": {"type": "json_object"}, "tool_choice": "required"}, "response_format"),
])
def test_bad_constraints_are_refused_naming_the_field(client, extra, where):
    import openai
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, messages=[QUESTION], tools=TOOLS,
                                       max_tokens=4, **extra)
    assert where in str(info.value)


def test_rows_of_different_automata_decode_together(engine, chat_format, tokenizer):
    """Each row follows its own automaton in the stacked table (states offset per automaton)."""
    from seetjax.serving.protocol import ChatCompletionRequest
    base = {"model": MODEL_NAME, "messages": [QUESTION]}
    requests = [
        {**base, "tools": FORCED_TOOLS, "tool_choice": "required"},
        {**base, "response_format": {"type": "json_schema", "json_schema": {
            "name": "n", "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                    "required": ["n"]}}}},
        {**base, "response_format": {"type": "json_object"}}]
    prompts = [chat_format.prompt(ChatCompletionRequest.model_validate(r)) for r in requests]
    assert len({id(p.constraint) for p in prompts}) == 3
    handles = [engine.submit(p.ids, GenerationParams(max_tokens=48, temperature=0.0,
                                                     constraint=p.constraint))
               for p in prompts]
    for prompt, handle in zip(prompts, handles):
        (choice,) = handle.result(120).choices
        state = prompt.constraint.advance(0, choice.token_ids)
        assert state >= 0  # every token was allowed by this row's own automaton
        if choice.finish_reason == "stop":
            assert choice.token_ids[-1] in tokenizer.stop_ids
