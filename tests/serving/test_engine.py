"""The continuous-batching engine without HTTP: token identity with the sampler, requests joining
a running batch, prefix reuse, per-request sampling settings, stop strings, the bounded queue."""

import threading
import time

import pytest

from seetjax.serving.engine import Engine
from seetjax.serving.requests import (
    EngineStoppedError,
    GenerationParams,
    QueueFullError,
    RequestDone,
    TokenEvent,
)
from tests.serving.servinglib import ANSWER, QUESTION, TOOLS, greedy_alone, np_close, tool_dialog

GREEDY = GenerationParams(max_tokens=24, temperature=0.0)
TEXTS = ["List my files", "Move report.pdf into the docs folder, then show me what is in docs",
         "hi", "What is 2+2? Compute it with the math tool and tell me the result in words."]


def chat(tokenizer, text, system=None):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}]
    return tokenizer.chat_ids(messages, add_generation_prompt=True)


def wait_until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def first_event(engine, prompt, params):
    """Submits; returns (handle, an Event set at the request's first output)."""
    started = threading.Event()
    events = []

    def on_event(event):
        events.append(event)
        started.set()

    return engine.submit(prompt, params, on_event=on_event), started, events


def test_greedy_output_is_token_identical_to_the_sampler_alone(engine, tokenizer):
    prompts = [chat(tokenizer, t) for t in TEXTS]
    prompts.append(tokenizer.chat_ids([QUESTION], TOOLS, add_generation_prompt=True))
    # Two start a batch; the others join it while it decodes.
    early = [engine.submit(p, GREEDY) for p in prompts[:2]]
    wait_until(lambda: engine.stats.chunks > 0 or all(h.done for h in early))
    late = [engine.submit(p, GREEDY) for p in prompts[2:]]
    outputs = [h.result(120) for h in early + late]
    for prompt, output in zip(prompts, outputs):
        ref = greedy_alone(engine.sampler, engine.params, prompt, GREEDY.max_tokens,
                           tokenizer.stop_ids)
        (choice,) = output.choices
        assert choice.token_ids == ref.tokens
        assert choice.finish_reason == ref.finish_reason
        assert np_close(choice.logprobs, ref.logprobs, atol=1e-4)
        body = ref.tokens[:-1] if ref.finish_reason == "stop" else ref.tokens
        assert choice.text == tokenizer.decode(body)
        assert output.prompt_tokens == len(prompt)
    # The taught dialog's first reply is its tool call.
    assert outputs[-1].choices[0].text.startswith('<tool_call>{"name": "get_weather"')


def test_a_short_request_joins_and_leaves_while_a_long_one_decodes(engine, tokenizer):
    long_prompt = chat(tokenizer, "Tell me everything about every file you can find.")
    long, started, _ = first_event(engine, long_prompt, GenerationParams(
        max_tokens=160, temperature=0.0, ignore_eos=True))
    assert started.wait(60)
    short = engine.submit(chat(tokenizer, "hi"), GenerationParams(max_tokens=8, temperature=0))
    assert len(short.result(60).choices[0].token_ids) <= 8
    assert not long.done  # the short one did not wait for the long one
    out = long.result(120)
    assert out.choices[0].finish_reason == "length" and len(out.choices[0].token_ids) == 160


def test_static_batches_make_newcomers_wait(tiny_model, tokenizer, engine):
    static = Engine(tiny_model, tokenizer, max_batch=2, chunk_steps=8, max_context=4096,
                    batching="static", sampler=engine.sampler)
    with static:
        long, started, _ = first_event(static, chat(tokenizer, "Tell me about every file."),
                                       GenerationParams(max_tokens=64, temperature=0.0,
                                                        ignore_eos=True))
        assert started.wait(60)
        short = static.submit(chat(tokenizer, "hi"), GenerationParams(max_tokens=4,
                                                                       temperature=0.0))
        short.result(120)
        assert long.done  # it could only start once the running batch was over


def test_prefix_reuse_computes_only_the_new_tokens(engine, tokenizer):
    system = "You are a careful assistant for a file system. " * 4
    first = chat(tokenizer, "List my files", system)
    second = chat(tokenizer, "Show me the docs folder", system)
    engine.generate(first, GREEDY, timeout=120)
    out = engine.generate(second, GREEDY, timeout=120)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert out.cached_tokens >= shared > engine.prefixes.min_tokens
    ref = greedy_alone(engine.sampler, engine.params, second, GREEDY.max_tokens,
                       tokenizer.stop_ids)
    assert out.choices[0].token_ids == ref.tokens

    # A conversation's next turn reuses the previous prompt and reply (as cached).
    dialog = tool_dialog()
    turn1 = tokenizer.chat_ids(dialog[:1], TOOLS, add_generation_prompt=True)
    reply1 = engine.generate(turn1, GREEDY, timeout=120).choices[0]
    turn2 = tokenizer.chat_ids(dialog[:3], TOOLS, add_generation_prompt=True)
    out2 = engine.generate(turn2, GREEDY, timeout=120)
    # At least that: a forced call of the same dialog served before may have cached more.
    assert out2.cached_tokens >= len(turn1) + len(reply1.token_ids)
    assert out2.choices[0].text == ANSWER


def test_seeded_sampling_does_not_depend_on_the_batch(engine, tokenizer):
    prompt = chat(tokenizer, "List my files")
    params = GenerationParams(max_tokens=12, temperature=1.5, top_p=0.99, seed=7, n=3)
    alone = engine.generate(prompt, params, timeout=120)
    others = [engine.submit(chat(tokenizer, t), GenerationParams(max_tokens=20, seed=1))
              for t in TEXTS[:2]]
    crowded = engine.generate(prompt, params, timeout=120)
    for h in others:
        h.result(120)
    tokens = [c.token_ids for c in alone.choices]
    assert tokens == [c.token_ids for c in crowded.choices]
    assert len({tuple(t) for t in tokens}) == 3  # each choice draws its own tokens
    other_seed = engine.generate(prompt, GenerationParams(max_tokens=12, temperature=1.5, seed=8),
                                 timeout=120)
    assert other_seed.choices[0].token_ids != tokens[0]


def test_top_k_1_and_a_tiny_nucleus_are_greedy(engine, tokenizer):
    prompt = chat(tokenizer, TEXTS[1])
    greedy = engine.generate(prompt, GREEDY, timeout=120).choices[0].token_ids
    for params in (GenerationParams(max_tokens=24, temperature=1.3, top_k=1, seed=3),
                   GenerationParams(max_tokens=24, temperature=0.7, top_p=1e-6, seed=4)):
        assert engine.generate(prompt, params, timeout=120).choices[0].token_ids == greedy


def test_stop_strings_end_a_choice_before_them(engine, tokenizer):
    prompt = chat(tokenizer, TEXTS[3])
    full = engine.generate(prompt, GREEDY, timeout=120).choices[0]
    # a 3-character stop string whose first occurrence is not at the start of the text
    stop = next(full.text[i:i + 3] for i in range(1, len(full.text) - 2)
                if full.text.index(full.text[i:i + 3]) >= 1)
    handle = engine.submit(prompt, GenerationParams(max_tokens=24, temperature=0.0,
                                                    stop=("zzz-never", stop)))
    events = list(handle.events(timeout=120))
    (choice,) = handle.result().choices
    assert choice.text == full.text[:full.text.index(stop)]
    assert choice.finish_reason == "stop"
    assert choice.token_ids == full.token_ids[:len(choice.token_ids)]
    assert "".join(e.text for e in events if isinstance(e, TokenEvent)) == choice.text
    assert isinstance(events[-1], RequestDone)


def test_a_full_queue_refuses_and_cancelled_requests_free_their_rows(engine, tokenizer):
    prompt = chat(tokenizer, "Tell me everything about every file you can find.")
    params = GenerationParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    running = [engine.submit(prompt, params) for _ in range(engine.max_batch)]
    wait_until(lambda: engine.active_rows == engine.max_batch)
    queued = [engine.submit(prompt, params) for _ in range(engine.max_queue)]
    with pytest.raises(QueueFullError) as refused:
        engine.submit(prompt, params)
    assert refused.value.retry_after > 0
    for handle in running + queued:
        handle.cancel()
    wait_until(lambda: engine.active_rows == 0 and engine.queue_length == 0)
    for handle in running + queued:
        with pytest.raises(EngineStoppedError, match="cancelled"):
            handle.result(10)
    assert engine.generate(chat(tokenizer, "hi"), GREEDY, timeout=120).choices[0].token_ids


def test_bad_requests_are_refused_with_the_reason(engine, tokenizer):
    with pytest.raises(ValueError, match="top_p"):
        GenerationParams(top_p=0.0)
    with pytest.raises(ValueError, match="top_logprobs"):
        GenerationParams(top_logprobs=21)
    with pytest.raises(ValueError, match=f"exceeds the context of {engine.max_context}"):
        engine.submit([1] * (engine.max_context - 50), GenerationParams(max_tokens=100))
    with pytest.raises(ValueError, match="n=5 exceeds"):
        engine.submit([1, 2], GenerationParams(n=5))
    with pytest.raises(ValueError, match="empty"):
        engine.submit([], GREEDY)


def test_a_request_whose_settings_fail_fails_alone(engine, tokenizer):
    with pytest.raises(ValueError, match="top_k=2147483648"):
        GenerationParams(top_k=2**31)
    with pytest.raises(ValueError, match="temperature=inf"):
        GenerationParams(temperature=float("inf"))
    long = GenerationParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    running = engine.submit(chat(tokenizer, "List my files"), long)
    wait_until(lambda: engine.active_rows == 1)
    bad = GenerationParams(max_tokens=8, top_k=5)
    object.__setattr__(bad, "top_k", 2**31)  # a caller's params changed after their checks
    failed = engine.submit(chat(tokenizer, "hi"), bad)
    with pytest.raises(EngineStoppedError, match="OverflowError"):
        failed.result(120)
    assert not running.done  # the batch it would have joined decodes on
    running.cancel()
    wait_until(lambda: engine.active_rows == 0)
    assert engine.generate(chat(tokenizer, "hi"), GREEDY, timeout=120).choices[0].token_ids
