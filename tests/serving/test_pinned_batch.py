"""A rollout pins the engine's batch (`Engine.reserve` -> `RowBatch.pin`): it holds the pinned
rows (a power of two) once it grows, steps down a quarter at a time when few rows are live and
back up to the pin, never shrinks its slots, and prefills prompts at its own slots, so a
rollout's comings and goings meet few shapes; greedy replies stay the sampler's own."""

import concurrent.futures
import dataclasses
from types import SimpleNamespace

import pytest

from seetjax.serving.engine import Engine
from seetjax.serving.prefix_cache import PrefixCache
from seetjax.serving.requests import GenerationParams
from seetjax.serving.rows import RowBatch
from tests.serving.servinglib import greedy_alone
from tests.serving.test_admission import random_prompts

GREEDY = GenerationParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def live(batch, rows, length=10):
    batch.choices = [SimpleNamespace(length=length) if i in rows else None
                     for i in range(len(batch.choices))]


def test_a_pinned_batch_steps_by_quarters_and_keeps_its_slots(engine):
    batch = RowBatch(engine.sampler, chunk_steps=8)
    batch.pin(5)
    assert (batch.floor, batch.pinned) == (8, True)
    batch.grow(3)
    assert len(batch.choices) == 8  # the pin, not the 4 rows three would take
    live(batch, {0, 5})
    batch.shrink()  # 2 of 8 live: a quarter of the rows
    assert len(batch.choices) == 2 and all(c is not None for c in batch.choices)
    batch.grow(3)
    assert len(batch.choices) == 8  # back to the pin, not to 4
    live(batch, set())
    batch.shrink()
    batch.shrink()
    assert len(batch.choices) == 1  # 8, 2, 1: the quarters
    batch.fit_slots(300)
    grown = batch.state.cache.slots
    assert grown >= 308
    live(batch, {0})
    batch.fit_slots(0)  # one short row live: an unpinned batch would halve its slots
    assert batch.state.cache.slots == grown
    assert batch.slots_wanted == grown

    free = RowBatch(engine.sampler, chunk_steps=8)
    free.grow(5)
    assert len(free.choices) == 8 and free.slots_wanted == 0
    live(free, {0, 5})
    free.shrink()
    assert len(free.choices) == 4  # unpinned: twice the live rows
    free.fit_slots(300)
    live(free, {0})
    free.fit_slots(0)
    assert free.state.cache.slots < grown


@pytest.mark.slow
def test_a_pinned_engine_meets_few_shapes_and_replies_as_the_sampler(engine, tokenizer):
    """Eight conversations of three turns, each submitting its next turn (its reply and a
    tool-like result appended) as soon as its reply is back, as a rollout's episodes do, with
    replies of different lengths so that rows come and go: every decode chunk runs at 8, 2 or
    1 rows, the slots only grow, and the greedy replies are the sampler's alone."""
    pinned = Engine(engine.model, tokenizer, max_batch=8, max_queue=16, chunk_steps=8,
                    max_context=4096, sampler=engine.sampler)
    pinned.reserve(8)
    shapes = []
    step = pinned.batch.inputs

    def inputs(*args, **kwargs):  # the shape of every decode chunk, in order
        shapes.append((len(pinned.batch.choices), pinned.batch.state.cache.slots))
        return step(*args, **kwargs)

    pinned.batch.inputs = inputs

    def conversation(i):
        prompt, turns = random_prompts(i, [20 + 5 * i])[0], []
        for turn in range(3):
            params = dataclasses.replace(GREEDY, max_tokens=2 + 7 * ((i + turn) % 4))
            reply = pinned.submit(prompt, params).result(120).choices[0].token_ids
            turns.append((prompt, params.max_tokens, reply))
            prompt = prompt + reply + random_prompts(100 + i, [3 + turn])[0]
        return turns

    with pinned, concurrent.futures.ThreadPoolExecutor(8) as pool:
        played = list(pool.map(conversation, range(8)))
    assert {rows for rows, _ in shapes} <= {8, 2, 1}, shapes
    slots = [s for _, s in shapes]
    assert slots == sorted(slots), slots
    for prompt, max_tokens, reply in (t for turns in played for t in turns[1:]):
        assert reply == greedy_alone(engine.sampler, engine.params, prompt, max_tokens, []).tokens


def test_a_pinned_batchs_prompts_are_prefilled_at_its_slots_and_not_kept(engine):
    prompt = random_prompts(7, [30])[0]
    cache = PrefixCache(engine.sampler, max_tokens=4096, min_tokens=4)
    seqs, _, _ = cache.prefill(engine.params, [prompt], 0, slots=256, remember=False)
    assert seqs.state.cache.slots == 256 and len(cache._entries) == 0
    seqs, _, _ = cache.prefill(engine.params, [prompt], 0)
    assert seqs.state.cache.slots < 256 and len(cache._entries) == 1
