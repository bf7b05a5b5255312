"""A rollout pins the engine's batch (`Engine.reserve` -> `RowBatch.pin`): it holds the pinned
rows (a power of two) once it grows, never shrinks its rows or slots, decodes its live rows
alone, parks finished conversations in their rows and prefills their next turns there, so a
rollout's comings and goings meet few shapes; greedy replies stay the sampler's own."""

import concurrent.futures
import dataclasses
from types import SimpleNamespace

import numpy as np
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
    batch.shrink()  # 2 of 8 live: pinned, the rows stay (decode computes the live ones alone)
    assert len(batch.choices) == 8
    live(batch, set())
    batch.shrink()
    assert len(batch.choices) == 8
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
    replies of different lengths so that rows come and go: every decode chunk runs at the 8
    rows pinned, decodes only its live rows when they are at most half of them, the slots only
    grow, and the greedy replies are the sampler's alone (each next turn prefilled in the row
    where its conversation is parked)."""
    pinned = Engine(engine.model, tokenizer, max_batch=8, max_queue=16, chunk_steps=8,
                    max_context=4096, sampler=engine.sampler)
    pinned.reserve(8)
    shapes = []
    step = pinned.batch.inputs

    decoded = []

    def inputs(stop_ids, wanted, rows):  # the shape of every decode chunk, in order
        shapes.append((len(pinned.batch.choices), pinned.batch.state.cache.slots))
        decoded.append((len(pinned.batch.choices) if rows is None else len(rows),
                        pinned.batch.active))
        return step(stop_ids, wanted, rows)

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
    assert {rows for rows, _ in shapes} <= {8, 1}, shapes  # 1 before the batch first grows
    # Chunks with few live rows decode those alone (`decode_rows`), padded to a power of two.
    assert all(rows == (held if 2 * active > held else max(1, 1 << (active - 1).bit_length()))
               for (held, _), (rows, active) in zip(shapes, decoded)), (shapes, decoded)
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


def test_a_few_live_rows_of_a_pinned_batch_decode_alone_and_reply_as_the_sampler(engine,
                                                                                  tokenizer):
    """Three requests in a batch pinned at 8 rows: their chunks compute 4 rows (the live three
    and one of padding, `decode_rows`), not 8, and the greedy replies are the sampler's."""
    pinned = Engine(engine.model, tokenizer, max_batch=8, max_queue=8, chunk_steps=8,
                    max_context=4096, sampler=engine.sampler)
    pinned.reserve(8)
    prompts = random_prompts(11, [12, 30, 21])
    with pinned:
        handles = [pinned.submit(p, dataclasses.replace(GREEDY, max_tokens=6 + 5 * i))
                   for i, p in enumerate(prompts)]
        replies = [h.result(120).choices[0].token_ids for h in handles]
    assert pinned.compile_counts()["decode_rows"] >= 1
    assert pinned.stats.row_steps < 8 * pinned.stats.completion_tokens / 3
    for i, (prompt, reply) in enumerate(zip(prompts, replies)):
        assert reply == greedy_alone(engine.sampler, engine.params, prompt, 6 + 5 * i, []).tokens


def test_a_parked_conversation_serves_its_next_turn_and_lends_a_copy_of_its_prefix(engine):
    """Rows 0 and 1 park conversations A and B (B shares A's first 10 tokens). A prompt that
    extends A whole takes A's row over; one sharing only A's first 15 tokens (a retried
    reply's turn) gets a copy of A's row in a free row, A staying parked for its own episode
    until taken; an unrelated prompt gets a free row with nothing cached; a parked row of
    another weight version serves nothing."""
    batch = RowBatch(engine.sampler, chunk_steps=8)
    batch.pin(4)
    a = random_prompts(21, [20])[0]
    b = a[:10] + random_prompts(22, [12])[0]
    batch.free_rows(4)
    batch.prefill(engine.params, [0, 1], [0, 0], [a, b])
    batch.park(0, a, 0)
    batch.park(1, b, 0)
    retried, fresh = a[:15] + random_prompts(23, [5])[0], random_prompts(24, [9])[0]
    claims = batch.claim([retried, a + [5, 6], fresh], 0, min_tokens=4)
    assert claims[1] == (0, 20) and claims[0][1] == 15 and claims[2][1] == 0
    assert {claims[0][0], claims[2][0]} == {2, 3} and list(batch.parked) == [1]
    keys = [np.asarray(k) for k in batch.state.cache.keys]
    for k in keys:  # the copy holds A's cached keys
        np.testing.assert_array_equal(k[claims[0][0], ..., :20], k[0, ..., :20])
    assert batch.claim([b + [1, 2]], 1, min_tokens=4)[0][1] == 0  # B is of version 0
