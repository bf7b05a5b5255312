"""The KV-cache sampler against teacher forcing, recomputation and transformers' greedy generate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from seetjax.models import positions_from_mask
from seetjax.models.hf import load_hf_checkpoint
from seetjax.sampling import Sampler, SamplingParams
from seetjax.sampling.sampler import fine_bucket

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [[5, 17, 300, 41, 9, 77, 12], [400, 3], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]]


@pytest.fixture(scope="module")
def model(hf_qwen2_dir):
    return load_hf_checkpoint(hf_qwen2_dir)


@pytest.fixture(scope="module")
def params(model):
    from flax import nnx
    return nnx.state(model)


@pytest.fixture(scope="module")
def sampler(model):
    return Sampler(model, pad_id=0)


def full_logits(model, ids):
    tokens = jnp.asarray([ids])
    mask = jnp.ones_like(tokens)
    return np.asarray(model(tokens, positions_from_mask(mask), mask)[0][0])


def test_sampled_logprobs_equal_teacher_forced(model, params, sampler):
    seqs = sampler.prefill(params, PROMPTS)
    _, completions = sampler.generate(params, seqs, jax.random.key(1), 20, [],
                                      SamplingParams(temperature=1.0))
    for prompt, completion in zip(PROMPTS, completions):
        assert len(completion.tokens) == 20 and completion.finish_reason == "length"
        logits = full_logits(model, prompt + completion.tokens)[len(prompt) - 1:-1]
        teacher = np.asarray(jax.nn.log_softmax(logits))[np.arange(20), completion.tokens]
        np.testing.assert_allclose(completion.logprobs, teacher, atol=1e-4)


def test_prefix_extension_equals_recomputation(model, params, sampler):
    """Prompt, generated turn and an appended observation: the next-token logits and the next
    greedy turn equal those computed from scratch over the whole sequence."""
    seqs = sampler.prefill(params, PROMPTS)
    seqs, first = sampler.generate(params, seqs, jax.random.key(2), 6, [],
                                   SamplingParams(temperature=1.0))
    observations = [[1, 2, 3], [], list(range(30, 60))]
    seqs = sampler.extend(params, seqs, observations)
    histories = [p + c.tokens + o for p, c, o in zip(PROMPTS, first, observations)]
    for row, history in enumerate(histories):
        np.testing.assert_allclose(seqs.state.logits[row], full_logits(model, history)[-1],
                                   atol=1e-4)
    _, second = sampler.generate(params, seqs, jax.random.key(3), 5, [], GREEDY)
    fresh = sampler.prefill(params, histories)
    _, expected = sampler.generate(params, fresh, jax.random.key(3), 5, [], GREEDY)
    assert [c.tokens for c in second] == [c.tokens for c in expected]


def test_greedy_matches_transformers_generate(hf_qwen2_dir, params, sampler):
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_qwen2_dir).eval()
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=24,
                          min_new_tokens=24, pad_token_id=0)
    expected = out[:, width:].tolist()
    _, completions = sampler.generate(params, sampler.prefill(params, PROMPTS),
                                      jax.random.key(0), 24, [], GREEDY)
    assert [c.tokens for c in completions] == expected


def test_stop_tokens_and_per_row_limits(params, sampler):
    _, free = sampler.generate(params, sampler.prefill(params, PROMPTS), jax.random.key(0), 8, [],
                               GREEDY)
    stop = free[0].tokens[2]
    stops, limits = [[stop], [stop], [999]], [8, 3, 5]
    _, done = sampler.generate(params, sampler.prefill(params, PROMPTS), jax.random.key(0), limits,
                               stops, GREEDY)
    for completion, reference, row_stops, limit in zip(done, free, stops, limits):
        ends = [i for i, t in enumerate(reference.tokens[:limit]) if t in row_stops]
        cut = ends[0] + 1 if ends else limit
        assert completion.tokens == reference.tokens[:cut]
        assert completion.finish_reason == ("stop" if ends else "length")
        assert len(completion.logprobs) == cut
    assert done[0].finish_reason == "stop" and done[2].finish_reason == "length"


def test_rows_that_finish_early_do_not_disturb_the_others(params, sampler):
    _, alone = sampler.generate(params, sampler.prefill(params, PROMPTS[2:]), jax.random.key(0),
                                12, [], GREEDY)
    _, mixed = sampler.generate(params, sampler.prefill(params, PROMPTS), jax.random.key(0),
                                [1, 0, 12], [], GREEDY)
    assert mixed[1].tokens == [] and len(mixed[0].tokens) == 1
    assert mixed[2].tokens == alone[0].tokens


def test_select_keeps_rows_and_their_continuations(params, sampler):
    seqs = sampler.prefill(params, PROMPTS)
    seqs, first = sampler.generate(params, seqs, jax.random.key(5), 4, [], GREEDY)
    kept = sampler.select(seqs, [2, 0, 2])  # reordered, and row 2 copied (a GRPO group)
    kept = sampler.extend(params, kept, [[7, 7], [8], [9]])
    _, cont = sampler.generate(params, kept, jax.random.key(5), 6, [], GREEDY)
    histories = [PROMPTS[2] + first[2].tokens + [7, 7], PROMPTS[0] + first[0].tokens + [8],
                 PROMPTS[2] + first[2].tokens + [9]]
    _, expected = sampler.generate(params, sampler.prefill(params, histories), jax.random.key(5), 6,
                                   [], GREEDY)
    assert [c.tokens for c in cont] == [c.tokens for c in expected]


def test_chunked_prefill_and_cache_growth_change_nothing(model, params):
    long_prompts = [list(range(1, 90)), list(range(100, 140))]
    small = Sampler(model, pad_id=0, min_chunk=16, max_chunk=16, min_slots=16)
    large = Sampler(model, pad_id=0, max_chunk=128, min_slots=256)
    # scores of 2 rows x heads x 16 tokens x 256 slots fit; 32 tokens do not: 16-token chunks
    tight = Sampler(model, pad_id=0, max_chunk=128, min_slots=256,
                    max_score_bytes=2 * model.config.num_heads * 16 * 256 * 4)
    assert tight._chunk_size(tight.empty(2).state, 0) == 16
    assert large._chunk_size(large.empty(2).state, 0) == 128
    outs = []
    for s in (small, large, tight):
        seqs = s.prefill(params, long_prompts)
        seqs, c = s.generate(params, seqs, jax.random.key(0), 40, [], GREEDY)
        outs.append(([x.tokens for x in c], np.asarray(seqs.state.logits), seqs.state.cache.slots))
    assert outs[0][0] == outs[1][0] == outs[2][0]
    np.testing.assert_allclose(outs[0][1], outs[1][1], atol=1e-4)
    np.testing.assert_allclose(outs[2][1], outs[1][1], atol=1e-4)
    # 129 tokens: grown to the next power of two
    assert outs[0][2] == outs[1][2] == outs[2][2] == 256


def test_compiles_once_per_bucket(model, params):
    s = Sampler(model, pad_id=0)
    for length, new in [(5, 10), (9, 16), (16, 3), (2, 12)]:
        prompts = [list(range(1, length + 1))] * 3
        s.generate(params, s.prefill(params, prompts), jax.random.key(length), new, [], GREEDY)
    assert s.compile_count() == 2  # one prefill (16 tokens x 4 rows), one decode (16 steps)
    s.generate(params, s.prefill(params, [[1, 2]] * 5), jax.random.key(0), 40, [], GREEDY)
    assert s.compile_count() == 4  # 8 rows: new prefill; 64 steps: new decode


def test_bad_arguments_are_refused(model, params, sampler):
    seqs = sampler.prefill(params, PROMPTS)
    with pytest.raises(ValueError, match="2 chunks for 3 sequences"):
        sampler.extend(params, seqs, [[1], [2]])
    with pytest.raises(ValueError, match="out of range"):
        sampler.select(seqs, [3])
    with pytest.raises(ValueError, match="stop-id lists"):
        sampler.generate(params, seqs, jax.random.key(0), 4, [[1], [2]])
    with pytest.raises(ValueError, match="Sampler.max_score_bytes=0: must be positive"):
        Sampler(model, pad_id=0, max_score_bytes=0)


def test_sharded_sampling_matches_one_device(hf_llama_dir):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
    from flax import nnx

    from seetjax.runtime import sharding
    mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
    results = []
    for m in (None, mesh):
        model = load_hf_checkpoint(hf_llama_dir, mesh=m)
        s = Sampler(model, pad_id=0, mesh=m)
        seqs = s.prefill(nnx.state(model), PROMPTS)
        seqs, first = s.generate(nnx.state(model), seqs, jax.random.key(0), 5, [], GREEDY)
        seqs = s.select(s.extend(nnx.state(model), seqs, [[4], [5, 6], [7]]), [2, 1])
        seqs, second = s.generate(nnx.state(model), seqs, jax.random.key(0), 5, [], GREEDY)
        results.append([c.tokens for c in first + second])
    assert results[0] == results[1]
    keys = seqs.state.cache.keys[0]  # [rows, kv_heads, head_dim, slots]
    assert keys.sharding.spec == jax.sharding.PartitionSpec(("data", "fsdp"), "tensor")
    assert keys.shape[0] == 4  # 2 rows padded to a multiple of the 4-way batch split


def test_fine_bucket_sizes_are_powers_of_two_or_three_quarters_of_one():
    sizes = [fine_bucket(n, 16) for n in range(0, 600)]
    assert sorted(set(sizes)) == [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768]
    for n, size in enumerate(sizes):
        assert size >= max(n, 16) and (size == 16 or size < 1.5 * n)  # a third apart at most
