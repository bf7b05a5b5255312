"""The OpenAI-compatible server over real sockets on 127.0.0.1, driven by the official `openai`
client (and raw HTTP where the client would hide what is checked: SSE framing, bad bodies)."""

import json
import time

import httpx2 as httpx
import openai
import pytest

from tests.serving.servinglib import (
    ANSWER,
    MODEL_NAME,
    OBSERVATION,
    QUESTION,
    TOOLS,
    LiveServer,
    greedy_alone,
    json_or_text,
    np_close,
    sse_events,
)

SYSTEM = {"role": "system", "content": "You answer briefly."}
USER = {"role": "user", "content": "List my files, then move report.pdf into docs."}


def create(client, **kw):
    kw.setdefault("model", MODEL_NAME)
    kw.setdefault("messages", [SYSTEM, USER])
    return client.chat.completions.create(**kw)


def post(server, body, **kw):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}/chat/completions", content=content,
                      headers={"content-type": "application/json", **kw.pop("headers", {})},
                      timeout=120, **kw)


def still_answers(client):
    reply = create(client, max_tokens=2, temperature=0)
    assert reply.choices[0].message.role == "assistant"


def test_models_and_health(client, server, engine):
    (model,) = client.models.list().data
    assert model.id == MODEL_NAME and model.owned_by == "seetjax"
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    health = httpx.get(f"{server.root}/health").json()
    assert health["status"] == "ok" and health["max_batch"] == engine.max_batch


def test_greedy_chat_is_token_identical_to_the_sampler(client, engine, tokenizer):
    reply = create(client, max_tokens=16, temperature=0, logprobs=True, top_logprobs=3,
                   extra_body={"return_token_ids": True})
    (choice,) = reply.choices
    prompt = tokenizer.chat_ids([SYSTEM, USER], add_generation_prompt=True)
    assert reply.prompt_token_ids == prompt
    ref = greedy_alone(engine.sampler, engine.params, prompt, 16, tokenizer.stop_ids)
    assert choice.token_ids == ref.tokens
    assert choice.finish_reason == ref.finish_reason
    assert reply.usage.prompt_tokens == len(prompt)
    assert reply.usage.completion_tokens == len(ref.tokens)
    assert reply.usage.total_tokens == len(prompt) + len(ref.tokens)
    entries = choice.logprobs.content
    assert np_close([e.logprob for e in entries], ref.logprobs)
    for entry in entries:
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].token == entry.token
    body = len(ref.tokens) - (ref.finish_reason == "stop")
    text = bytes(b for e in entries[:body] for b in e.bytes).decode()
    assert text == choice.message.content == tokenizer.decode(ref.tokens[:body])


def test_streaming_gives_the_same_reply_in_chunks(client, server):
    request = dict(max_tokens=24, temperature=0, messages=[USER])
    whole = create(client, **request).choices[0]
    chunks = list(create(client, stream=True, stream_options={"include_usage": True}, **request))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    with httpx.stream("POST", f"{server.url}/chat/completions", timeout=120,
                      json={"model": MODEL_NAME, "stream": True, **request}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    assert all(json_or_text(e)["object"] == "chat.completion.chunk" for e in events[:-1])


def test_n_choices_are_seeded_and_reproducible(client):
    request = dict(n=3, temperature=1.5, seed=11, max_tokens=8,
                   extra_body={"return_token_ids": True})
    first, again = create(client, **request), create(client, **request)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert first.usage.completion_tokens == sum(len(c.token_ids) for c in first.choices)
    assert [c.token_ids for c in first.choices] == [c.token_ids for c in again.choices]
    assert len({tuple(c.token_ids) for c in first.choices}) > 1
    streamed = list(create(client, stream=True, **{k: v for k, v in request.items()
                                                   if k != "extra_body"}))
    for choice in first.choices:
        text = "".join(c.choices[0].delta.content or "" for c in streamed
                       if c.choices and c.choices[0].index == choice.index)
        assert text == choice.message.content


def test_tool_call_round_trip(client, tokenizer):
    first = create(client, messages=[QUESTION], tools=TOOLS, temperature=0, max_tokens=48)
    (choice,) = first.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # The call goes back with its result; the model answers.
    history = [QUESTION, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": OBSERVATION}]
    second = create(client, messages=history, tools=TOOLS, temperature=0, max_tokens=48,
                    extra_body={"return_token_ids": True})
    assert second.choices[0].message.content == ANSWER
    assert second.choices[0].finish_reason == "stop"
    # Rendered by the template exactly as the rollout renders the same conversation.
    rendered = tokenizer.chat_ids(
        [QUESTION, {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
         {"role": "tool", "content": OBSERVATION}], TOOLS, add_generation_prompt=True)
    assert second.prompt_token_ids == rendered
    assert second.usage.prompt_tokens_details.cached_tokens > 0  # turn 1 was reused


def test_tool_calls_stream(client):
    chunks = list(create(client, messages=[QUESTION], tools=TOOLS, temperature=0,
                         max_tokens=48, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == ""  # the call text is not content
    calls = [t for d in deltas for t in d.tool_calls or []]
    assert [(t.index, t.function.name) for t in calls] == [(0, "get_weather")]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_and_named(client, tokenizer):
    plain = create(client, messages=[QUESTION], tools=TOOLS, tool_choice="none",
                   temperature=0, max_tokens=48).choices[0]
    assert plain.message.tool_calls is None and plain.finish_reason == "stop"
    assert plain.message.content.startswith("<tool_call>")
    named = create(client, messages=[QUESTION], tools=TOOLS, temperature=0, max_tokens=48,
                   tool_choice={"type": "function", "function": {"name": "get_weather"}},
                   extra_body={"return_token_ids": True})
    generation = tokenizer.chat_text([QUESTION], TOOLS, add_generation_prompt=True)
    assert named.prompt_token_ids == tokenizer.encode(generation)
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and named.choices[0].finish_reason == "tool_calls"


def test_replies_that_do_not_parse_are_content(client):
    cut = create(client, messages=[QUESTION], tools=TOOLS, temperature=0, max_tokens=48,
                 stop=['"arguments"']).choices[0]
    assert cut.message.tool_calls is None and cut.finish_reason == "stop"
    assert cut.message.content == '<tool_call>{"name": "get_weather", '
    short = create(client, messages=[QUESTION], tools=TOOLS, temperature=0,
                   max_tokens=5).choices[0]
    assert short.message.tool_calls is None and short.finish_reason == "length"
    assert short.message.content.startswith("<tool_call>")


def _message(text):
    return [{"role": "user", "content": text}]


OK = {"model": MODEL_NAME, "messages": _message("hi")}
BAD_BODIES = [
    (b"{bad", 400, None, "invalid_json"),
    (b"[]", 400, None, "invalid_request"),
    (b"", 400, None, None),
    ({"model": MODEL_NAME}, 400, "messages", "missing_required_parameter"),
    ({"messages": _message("hi")}, 400, "model", "missing_required_parameter"),
    ({**OK, "messages": []}, 400, "messages", "invalid_value"),
    ({**OK, "messages": "hello"}, 400, "messages", "invalid_value"),
    ({**OK, "messages": [{"content": "x"}]}, 400, "messages[0]", "invalid_value"),
    ({**OK, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]", None),
    ({**OK, "messages": [{"role": "user"}]}, 400, "messages[0].content", None),
    ({**OK, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, "messages[0].content", None),
    ({**OK, "temperature": "hot"}, 400, "temperature", "invalid_value"),
    ({**OK, "temperature": 3}, 400, "temperature", "invalid_value"),
    ({**OK, "top_p": 0}, 400, "top_p", "invalid_value"),
    ({**OK, "n": 0}, 400, "n", "invalid_value"),
    ({**OK, "n": 99}, 400, "n", "invalid_value"),
    ({**OK, "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    ({**OK, "max_tokens": 100000}, 400, "max_tokens", "invalid_value"),
    ({**OK, "max_completion_tokens": 100000}, 400, "max_completion_tokens", "invalid_value"),
    ({**OK, "max_tokens": "ten"}, 400, "max_tokens", "invalid_value"),
    ({**OK, "stream": "yes"}, 400, "stream", "invalid_value"),
    ({**OK, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "invalid_value"),
    ({**OK, "top_logprobs": 5}, 400, "top_logprobs", "invalid_value"),
    ({**OK, "presence_penalty": 0.5}, 400, "presence_penalty", "invalid_value"),
    ({**OK, "tools": [{"type": "function", "function": {"name": "bad name!"}}]}, 400,
     "tools[0].function.name", "invalid_value"),
    ({**OK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     400, "tool_choice", "invalid_value"),
    ({**OK, "messages": [QUESTION, {"role": "tool", "tool_call_id": "call_x", "content": "1"}]},
     400, "messages[1].tool_call_id", "invalid_value"),
    ({**OK, "messages": [QUESTION, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     400, "messages[1].tool_calls[0].function.arguments", "invalid_value"),
    ({**OK, "model": "gpt-4"}, 404, "model", "model_not_found"),
]


@pytest.mark.parametrize("body,status,param,code", BAD_BODIES)
def test_bad_input_gets_an_openai_error_and_the_server_stays_up(server, client, body, status,
                                                                 param, code):
    response = post(server, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"]
    if code is not None:
        assert error["code"] == code
    still_answers(client)


def test_over_the_context_names_both_numbers(server, client, engine, tokenizer):
    messages = _message("word " * 3900)
    prompt = len(tokenizer.chat_ids(messages, add_generation_prompt=True))
    assert prompt + 400 > engine.max_context
    response = post(server, {**OK, "messages": messages, "max_tokens": 400})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert f"maximum context length is {engine.max_context} tokens" in error["message"]
    assert f"{prompt} in the messages" in error["message"]
    assert "400 in the completion" in error["message"]
    still_answers(client)


def test_unknown_paths_and_methods_and_large_bodies(server, client):
    missing = httpx.get(f"{server.url}/embeddings")
    assert missing.status_code == 404 and missing.json()["error"]["message"]
    assert httpx.get(f"{server.url}/chat/completions").status_code == 405
    huge = post(server, {**OK, "messages": _message("x" * (300 << 10))})
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    still_answers(client)


def test_a_full_queue_answers_429_with_retry_after(server, client, engine, tokenizer):
    from seetjax.serving.requests import GenerationParams
    filler = GenerationParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    prompt = tokenizer.chat_ids(_message("fill"), add_generation_prompt=True)
    handles = [engine.submit(prompt, filler) for _ in range(engine.max_batch)]
    deadline = time.monotonic() + 30
    while engine.active_rows < engine.max_batch:  # all rows busy: what comes next must queue
        assert time.monotonic() < deadline
        time.sleep(0.01)
    handles += [engine.submit(prompt, filler) for _ in range(engine.max_queue)]
    try:
        with pytest.raises(openai.RateLimitError) as refused:
            create(client, max_tokens=4)
        assert int(refused.value.response.headers["retry-after"]) >= 1
        assert refused.value.body["code"] == "rate_limit_exceeded"
    finally:
        for handle in handles:
            handle.cancel()
    still_answers(client)


def test_a_client_that_hangs_up_mid_stream_frees_its_rows(server, engine):
    cancelled = engine.stats.cancelled
    body = {**OK, "stream": True, "max_tokens": 500, "ignore_eos": True, "temperature": 0}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body,
                      timeout=120) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # tokens are flowing: hang up
    deadline = time.monotonic() + 30
    while engine.active_rows or engine.stats.cancelled == cancelled:
        assert time.monotonic() < deadline, "the stream's rows were not freed"
        time.sleep(0.05)
    assert engine.stats.completion_tokens  # and the engine keeps serving
    assert httpx.get(f"{server.root}/health").json()["active_rows"] == 0


def test_an_api_key_is_required_when_set(engine):
    from seetjax.serving.app import create_app
    from seetjax.serving.deps import ServerConfig
    app = create_app(engine, ServerConfig(model_name=MODEL_NAME, api_key="sekret"))
    with LiveServer(app) as keyed:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "sekret"}):
            response = post(keyed, OK, headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"{keyed.url}/models").status_code == 401
        assert httpx.get(f"{keyed.root}/health").status_code == 200  # probes need no key
        good = openai.OpenAI(base_url=keyed.url, api_key="sekret", max_retries=0)
        assert good.chat.completions.create(model=MODEL_NAME, messages=OK["messages"],
                                            max_tokens=2).choices
    assert engine.running  # the keyed app did not own the engine: it is still serving


def test_explicit_nulls_mean_the_defaults(server):
    response = post(server, {**OK, "n": None, "stream": None, "logprobs": None, "seed": None,
                             "stop": None, "temperature": None, "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == 1
