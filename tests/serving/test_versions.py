"""Weight versions in the serving engine: `update_weights` swaps the weights and the version
between decode chunks, every token carries its version, a prefix cached under old weights is
never reused, and /metrics reports the version served."""

import threading

import httpx2 as httpx
import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from prometheus_client.parser import text_string_to_metric_families

from seetjax.serving.app import create_app
from seetjax.serving.deps import ServerConfig
from seetjax.serving.engine import Engine
from seetjax.serving.requests import GenerationParams
from tests.serving.servinglib import MODEL_NAME, LiveServer, greedy_alone, np_close

GREEDY = GenerationParams(max_tokens=8, temperature=0.0)
SYSTEM = "You are a careful assistant for a file system. " * 4  # a prefix worth caching


@pytest.fixture(scope="module")
def new_weights(tiny_model):
    """The served model's weights, perturbed: what a learner's update hands the engine."""
    v0 = nnx.state(tiny_model)
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(v0))))
    return jax.tree.map(lambda x: x + 0.5 * jnp.std(x) * jax.random.normal(next(keys), x.shape,
                                                                         x.dtype), v0)


@pytest.fixture
def fresh(tiny_model, tokenizer, engine):
    """An engine of its own (the shared one stays at version 0), on the shared sampler."""
    with Engine(tiny_model, tokenizer, max_batch=2, chunk_steps=8, max_context=4096,
                sampler=engine.sampler) as own:
        yield own


def _prompt(tokenizer):
    return tokenizer.chat_ids([{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": "List my files"}],
                              add_generation_prompt=True)


def test_a_prefix_cached_before_an_update_is_recomputed_not_reused(fresh, new_weights,
                                                                   tokenizer):
    prompt = _prompt(tokenizer)
    before = fresh.generate(prompt, GREEDY, timeout=120)
    again = fresh.generate(prompt, GREEDY, timeout=120)
    assert again.cached_tokens > fresh.prefixes.min_tokens  # at v0 the cache serves it
    assert before.choices[0].versions == again.choices[0].versions == [0] * 8
    fresh.update_weights(new_weights, 1)
    assert fresh.weight_version == 1 and fresh.params is new_weights
    assert fresh.prefixes.drop_older(1) == 0  # the update dropped every v0 entry already
    after = fresh.generate(prompt, GREEDY, timeout=120)
    assert after.cached_tokens == 0  # the v0 entries are gone, not reused
    (choice,) = after.choices
    assert choice.versions == [1] * len(choice.token_ids)
    ref = greedy_alone(fresh.sampler, new_weights, prompt, 8, tokenizer.stop_ids)
    assert choice.token_ids == ref.tokens and np_close(choice.logprobs, ref.logprobs)
    assert ref.tokens != before.choices[0].token_ids  # the check tells the weights apart
    with pytest.raises(ValueError, match="Engine.weight_version=1: must be above"):
        fresh.update_weights(new_weights, 1)
    config = ServerConfig(model_name=MODEL_NAME, max_request_bytes=1 << 16, max_tokens_limit=64)
    with LiveServer(create_app(fresh, config)) as live:
        text = httpx.get(f"{live.root}/metrics").text
    (info,) = [s for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "seetjax_model_info"]
    assert info.labels == {"model": MODEL_NAME, "version": "1"} and info.value == 1


def test_an_update_between_chunks_is_seen_by_the_next_chunk(fresh, new_weights, tokenizer):
    prompt = _prompt(tokenizer)
    updated = threading.Event()

    def on_event(event):  # on the decode thread, after the first chunk: lands before the next
        if not updated.is_set():
            updated.set()
            fresh.update_weights(new_weights, 1)

    handle = fresh.submit(prompt, GenerationParams(max_tokens=16, temperature=0.0,
                                                   ignore_eos=True), on_event=on_event)
    (choice,) = handle.result(120).choices
    assert choice.versions == [0] * 8 + [1] * 8  # chunks of 8: one per version
    ref = greedy_alone(fresh.sampler, new_weights, prompt + choice.token_ids[:8], 8, [-1])
    assert choice.token_ids[8:] == ref.tokens
    assert np_close(choice.logprobs[8:], ref.logprobs)
    stale = greedy_alone(fresh.sampler, nnx.state(fresh.model), prompt + choice.token_ids[:8],
                         8, [-1])
    assert not np_close(stale.logprobs, ref.logprobs)  # the check tells the weights apart


def test_a_conversation_parked_before_an_update_is_recomputed_not_reused(fresh, new_weights,
                                                                        tokenizer):
    """A rollout's engine (pinned: `reserve`) parks an episode's conversation in its row and
    prefills its next turn there; after an update, the parked v0 row is never reused: the next
    turn is computed whole under the new weights, as the sampler alone gives it."""
    fresh.reserve(2)
    prompt = _prompt(tokenizer)
    first = fresh.generate(prompt, GREEDY, timeout=120).choices[0].token_ids
    turn = prompt + first + tokenizer.encode(" ok")
    again = fresh.generate(turn, GREEDY, timeout=120)
    assert again.cached_tokens == len(prompt + first)  # at v0 its row serves it
    parked = again.choices[0].token_ids
    fresh.update_weights(new_weights, 1)
    assert not fresh.batch.parked
    nxt = turn + parked + tokenizer.encode(" next")
    after = fresh.generate(nxt, GREEDY, timeout=120)
    assert after.cached_tokens == 0
    ref = greedy_alone(fresh.sampler, new_weights, nxt, 8, tokenizer.stop_ids)
    (choice,) = after.choices
    assert choice.token_ids == ref.tokens and np_close(choice.logprobs, ref.logprobs)
    assert choice.versions == [1] * len(choice.token_ids)
    stale = greedy_alone(fresh.sampler, nnx.state(fresh.model), nxt, 8, tokenizer.stop_ids)
    assert not np_close(stale.logprobs, ref.logprobs)  # the check tells the weights apart
