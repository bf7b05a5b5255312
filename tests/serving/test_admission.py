"""Admission between decode chunks: the requests waiting are prefilled together (one batched
call, bucketed shapes: a second wave of the same shapes compiles nothing), and a chunk ends
early when a row it frees lets a waiting request in."""

import dataclasses
import time

import numpy as np

from seetjax.serving.engine import Engine
from seetjax.serving.requests import GenerationParams, RequestDone
from tests.serving.servinglib import greedy_alone

BLOCK = GenerationParams(max_tokens=400, temperature=0.0, ignore_eos=True)
SHORT = GenerationParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def random_prompts(seed, lengths):
    """Prompts sharing no prefix (nothing for the prefix cache to reuse)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(40, 120, size=n).tolist() for n in lengths]


def wait_rows(engine, rows):
    deadline = time.monotonic() + 60
    while engine.active_rows < rows:
        assert time.monotonic() < deadline, "the rows never filled"
        time.sleep(0.005)


def wave(engine, seed):
    """A request holding every row, three of different lengths queued behind it, then the
    holder cancelled: the three are admitted at once. Returns (prompts, outputs)."""
    blocker, *prompts = random_prompts(seed, [30, 20, 45, 70])
    holder = engine.submit(blocker, dataclasses.replace(BLOCK, n=engine.max_batch))
    wait_rows(engine, engine.max_batch)
    handles = [engine.submit(p, SHORT) for p in prompts]
    holder.cancel()
    return prompts, [h.result(120) for h in handles]


def test_waiting_requests_are_prefilled_together_and_compile_no_new_shapes(engine, tokenizer):
    wave(engine, 0)  # compiles this wave's shapes, if no test did
    programs = engine.compile_count()
    before = engine.stats.prefills
    prompts, outputs = wave(engine, 1)
    assert engine.stats.prefills - before == 2  # the holder's, then the three together
    assert engine.compile_count() == programs
    for prompt, output in zip(prompts, outputs):
        ref = greedy_alone(engine.sampler, engine.params, prompt, SHORT.max_tokens, [])
        assert output.choices[0].token_ids == ref.tokens


def test_a_chunk_ends_early_when_a_waiting_request_can_take_the_row(engine, tokenizer):
    """Two rows, 64-step chunks: A (6 tokens) and B (50) decode, C waits. C joins once A ends
    (C finishes before B); a chunk that ran its steps would have finished B before C began."""
    wide = Engine(engine.model, tokenizer, max_batch=2, chunk_steps=64, max_context=4096,
                  sampler=engine.sampler)
    done = []

    def note(name):
        return lambda event: done.append(name) if isinstance(event, RequestDone) else None

    with wide:
        a, b, c, blocker = random_prompts(2, [20, 20, 20, 20])
        holder = wide.submit(blocker, dataclasses.replace(BLOCK, n=2))
        wait_rows(wide, 2)
        handles = [wide.submit(a, SHORT, note("A")),
                   wide.submit(b, GenerationParams(max_tokens=50, temperature=0.0,
                                                   ignore_eos=True), note("B")),
                   wide.submit(c, SHORT, note("C"))]
        holder.cancel()
        for h in handles:
            h.result(120)
    assert done == ["A", "C", "B"]
