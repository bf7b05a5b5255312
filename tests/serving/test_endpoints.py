"""GET /metrics (parsed by prometheus_client's own parser) and POST /v1/completions (through the
official client's `completions.create`), over the shared live server."""

import httpx2 as httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.serving.servinglib import MODEL_NAME, greedy_alone, np_close


def scrape(server) -> dict:
    response = httpx.get(f"{server.root}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def value(families, name, **labels):
    (sample,) = [s for f in families.values() for s in f.samples
                 if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sample.value


def test_metrics_parse_and_count_what_was_served(server, client, engine):
    before = scrape(server)
    reply = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=5,
                                      temperature=0)
    after = scrape(server)
    assert value(after, "seetjax_model_info", model=MODEL_NAME, version="0") == 1
    assert value(after, "seetjax_rows_max") == engine.max_batch
    assert value(after, "seetjax_queue_depth") >= 0 and value(after, "seetjax_rows_busy") >= 0
    grown = (value(after, "seetjax_completion_tokens_total")
             - value(before, "seetjax_completion_tokens_total"))
    assert grown >= reply.usage.completion_tokens
    assert value(after, "seetjax_tokens_per_second") > 0
    ttft = after["seetjax_time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    count = value(after, "seetjax_time_to_first_token_seconds_count")
    assert count >= value(before, "seetjax_time_to_first_token_seconds_count") + 1
    assert value(after, "seetjax_time_to_first_token_seconds_bucket", le="+Inf") == count


def test_completions_continue_text_and_token_prompts(client, engine, tokenizer):
    text = "The weather in Paris"
    ids = tokenizer.encode(text)
    by_text = client.completions.create(model=MODEL_NAME, prompt=text, max_tokens=8,
                                        temperature=0, logprobs=2)
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=8,
                                       temperature=0)
    ref = greedy_alone(engine.sampler, engine.params, ids, 8, tokenizer.stop_ids)
    (choice,) = by_text.choices
    body = ref.tokens[:len(ref.tokens) - (ref.finish_reason == "stop")]
    assert choice.text == by_ids.choices[0].text == tokenizer.decode(body)
    assert choice.finish_reason == ref.finish_reason and by_text.object == "text_completion"
    assert by_text.usage.prompt_tokens == len(ids)
    assert by_text.usage.completion_tokens == len(ref.tokens)
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text
    assert np_close(lp.token_logprobs, ref.logprobs[:len(body)])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(len(top) <= 2 and max(top.values()) >= lp.token_logprobs[i] - 1e-5
               for i, top in enumerate(lp.top_logprobs))


def test_completions_take_n_stop_and_seed(client):
    kw = dict(model=MODEL_NAME, prompt="It is", max_tokens=12, temperature=1.0, seed=3, n=3)
    first, again = client.completions.create(**kw), client.completions.create(**kw)
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    assert sorted(c.index for c in first.choices) == [0, 1, 2]
    cut = client.completions.create(model=MODEL_NAME, prompt="It is", max_tokens=12,
                                    temperature=0, stop=[" "])
    assert " " not in cut.choices[0].text


@pytest.mark.parametrize("extra,param", [({"prompt": [10**9]}, "prompt"),
                                         ({"max_tokens": 10**6}, "max_tokens"),
                                         ({"echo": True}, "echo")])
def test_completions_refuse_what_they_cannot_do(client, extra, param):
    kw = {"model": MODEL_NAME, "prompt": "Hi", **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(**kw)
    assert param in str(info.value)
