"""What the server refuses, and how: numbers past what the engine holds, text that is not text
(lone UTF-16 surrogates), bodies not sent as JSON, fields it does not implement; and a client
without the key is refused before anything of its body is read. Real sockets on 127.0.0.1, the
official `openai` client where it can send the request, raw HTTP where it cannot."""

import json

import httpx2 as httpx
import openai
import pytest

from tests.serving.servinglib import MODEL_NAME, TOOLS, LiveServer

OK = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def post(url, content, headers=None):
    return httpx.post(f"{url}/chat/completions", content=content, timeout=120,
                      headers={"content-type": "application/json", **(headers or {})})


def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def still_answers(client):
    assert client.chat.completions.create(**OK).choices[0].message.role == "assistant"


@pytest.mark.parametrize("field,value", [("top_k", 2**31), ("top_k", 10**30),
                                         ("seed", 2**63), ("seed", -10**30)])
def test_numbers_past_what_the_engine_holds_are_refused_by_name(server, client, field, value):
    response = post(server.url, json.dumps({**OK, field: value}))
    error = error_of(response, 400)
    assert error["param"] == field and error["code"] == "invalid_value"
    still_answers(client)


LONE = "\ud800"  # valid JSON ("\ud800"), not valid text: no UTF-8 encoding exists
SURROGATES = [
    ({**OK, "model": LONE}, "model"),
    ({**OK, "messages": [{"role": "user", "content": f"hi {LONE}"}]}, "messages[0].content"),
    ({**OK, "messages": [{"role": "user", "content": [{"type": "text", "text": LONE}]}]},
     "messages[0].content[0].text"),
    ({**OK, "stop": ["ok", LONE]}, "stop[1]"),
    ({**OK, "user": LONE}, "user"),
    ({**OK, "tools": [{"type": "function", "function": {
        "name": "f", "description": LONE}}]}, "tools[0].function.description"),
    ({**OK, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {LONE: {}}}}}]},
     "tools[0].function.parameters.properties.\\ud800"),
]


@pytest.mark.parametrize("body,param", SURROGATES)
def test_a_lone_surrogate_is_a_400_naming_its_field(server, client, body, param):
    error = error_of(post(server.url, json.dumps(body)), 400)
    assert error["param"] == param and "surrogate" in error["message"]
    still_answers(client)


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain",
                                          None])
def test_a_body_not_sent_as_json_is_told_the_content_type(server, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = httpx.post(f"{server.url}/chat/completions", content=json.dumps(OK),
                          headers=headers, timeout=120)
    error = error_of(response, 415)
    assert "Content-Type: application/json" in error["message"]
    assert (content_type or "no Content-Type") in error["message"]
    assert error["code"] == "unsupported_media_type"


def test_a_client_without_the_key_is_refused_before_its_body_is_read(engine):
    from seetjax.serving.app import create_app
    from seetjax.serving.deps import ServerConfig
    app = create_app(engine, ServerConfig(model_name=MODEL_NAME, api_key="sekret",
                                          max_request_bytes=1024))
    with LiveServer(app) as keyed:
        for body in (b"{bad", b"[]", json.dumps({**OK, "pad": "x" * 4096}).encode()):
            error = error_of(post(keyed.url, body), 401)
            assert error["code"] == "invalid_api_key"
        form = httpx.post(f"{keyed.url}/chat/completions", content=b"{bad", timeout=120,
                          headers={"content-type": "text/plain"})
        assert form.status_code == 401
        # With the key, the same bodies get what is wrong with them.
        key = {"authorization": "Bearer sekret"}
        assert error_of(post(keyed.url, b"{bad", key), 400)["code"] == "invalid_json"
        assert error_of(post(keyed.url, b"x" * 2048, key), 413)["code"] == "request_too_large"


# Fields of vLLM, of OpenAI's legacy or audio APIs, and of other servers' templates: none is
# implemented here, so none may be silently ignored.
UNIMPLEMENTED = {
    "repetition_penalty": 1.1, "min_p": 0.1, "stop_token_ids": [1], "best_of": 2,
    "use_beam_search": True, "length_penalty": 1.0, "min_tokens": 4,
    "include_stop_str_in_output": True, "skip_special_tokens": False,
    "spaces_between_special_tokens": False, "truncate_prompt_tokens": 8, "prompt_logprobs": 1,
    "guided_json": {"type": "object"}, "guided_regex": "a+", "guided_choice": ["a", "b"],
    "guided_grammar": "root ::= 'a'", "guided_decoding_backend": "outlines",
    "structured_outputs": {"choice": ["a"]}, "chat_template": "{{ messages }}",
    "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": False,
    "continue_final_message": True, "echo": True, "documents": [{"text": "d"}],
    "functions": [{"name": "f"}], "function_call": "auto", "audio": {"voice": "alloy"},
    "prediction": {"type": "content", "content": "x"}, "reasoning_effort": "low",
    "service_tier": "flex", "web_search_options": {}, "priority": 1, "request_id": "r",
    "mm_processor_kwargs": {}, "top_a": 0.5, "typical_p": 0.9,
}


def test_unimplemented_fields_are_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**OK, extra_body=UNIMPLEMENTED)
    error = refused.value.body
    assert error["code"] == "unknown_parameter" and error["param"] in UNIMPLEMENTED
    for name in UNIMPLEMENTED:
        assert f"'{name}'" in error["message"]
    with pytest.raises(openai.BadRequestError) as nested:
        client.chat.completions.create(**{**OK, "messages": [
            {"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}]})
    assert nested.value.body["param"] == "messages[0].cache_control"


@pytest.mark.parametrize("field,value", [("parallel_tool_calls", False),
                                         ("modalities", ["text", "audio"]), ("store", True)])
def test_values_the_server_does_not_implement_are_refused_by_name(client, field, value):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**OK, tools=TOOLS, **{field: value})
    error = refused.value.body
    assert error["param"] == field and json.dumps(value) in error["message"]


def test_fields_that_change_nothing_here_are_accepted(client):
    messages = [{"role": "user", "content": "hi"},
                # An assistant message as OpenAI's own replies come back: nulls where nothing
                # was said.
                {"role": "assistant", "content": "hello", "refusal": None, "audio": None,
                 "function_call": None, "annotations": None},
                {"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(
        **{**OK, "messages": messages}, user="u1", metadata={"run": "r1"}, store=False,
        modalities=["text"], tools=TOOLS, parallel_tool_calls=True)
    assert reply.choices[0].message.role == "assistant"
