"""The memory plan (seetjax.rl.memory_plan) against the real programs: the states against the
learner's own arrays, per device on an 8-device mesh too; the update's and the sampler's figures
against `compiled.memory_analysis()` of their own jitted functions at tiny shapes; a plan that does
not fit refused with its changes; bad inputs named."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seetjax.config.sections import load_config_file
from seetjax.learner import create_learner
from seetjax.models.hf import load_hf_checkpoint
from seetjax.models.transformer import Transformer
from seetjax.rl.config import build_plan
from seetjax.rl.memory_plan import (
    GiB,
    MemoryPlanError,
    alternatives,
    check_launch,
    episode_rows,
    model_config_of,
    parse_bytes,
    parse_mesh,
    plan_memory,
    prefill_bytes,
    prefill_chunk,
)
from seetjax.rl.schedule import ScheduleConfig
from seetjax.rollout.branching import BranchConfig
from seetjax.runtime.sharding import make_mesh, mesh_sizes
from seetjax.sampling import Sampler
from tests.configlib import ROOT, config_with
from tests.learner.learner_testlib import rl_batch, tiny_config

# A width of 256 tokens (192 + 64, rounded up to 128), 8 rows; rows unpacked and the LM head over
# every position, the worst case the plan assumes, so the compiled shapes are the planned ones.
RUN = {"data.tasks_per_step": 2, "rollout.group_size": 4, "limits.max_episode_tokens": 192,
       "limits.max_reply_tokens": 64, "limits.max_turn_tokens": 128,
       "learner.counterfactual_weight": 0.0, "learner.loss": {"kl_coef": 0.04},
       "learner.pack_rows": False,
       "learner.target_logits": False, "learner.micro_batches": 2, "sft.enabled": False}


def run_config(**changes):
    return config_with("tiny", {**RUN, **changes})


def model_cfg(**overrides):
    return tiny_config(hidden_size=128, intermediate_size=384, vocab_size=1024, **overrides)


def nbytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(tree))


def shard_bytes(tree) -> int:
    """Bytes of the first device's shards."""
    return sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(tree))


def full_rows(plan, rows: int):
    """`rows` episodes of `plan.row_length` tokens (the rollouts' padding width)."""
    batch = rl_batch(rows=rows, length=24, padding_rows=0)
    width = plan.row_length

    def pad(x):
        return np.pad(np.asarray(x), ((0, 0), (0, width - np.shape(x)[1])))

    seqs = batch.sequences
    return batch.replace(old_logprobs=pad(batch.old_logprobs), sequences=seqs.replace(
        **{f: pad(getattr(seqs, f)) for f in ("tokens", "positions", "segment_ids", "loss_mask")}))


@pytest.mark.parametrize("lora,dtype,mesh", [(0, "float32", (1, 1, 1)),
                                             (4, "bfloat16", (1, 1, 1)),
                                             (0, "bfloat16", (1, 4, 2))])
def test_states_are_the_learners_own_per_device(lora, dtype, mesh):
    config = run_config(**{"learner.lora.rank": lora})
    plan = build_plan(config)
    cfg = model_cfg(param_dtype=dtype, dtype=dtype)
    devices = int(np.prod(mesh))
    _, state = create_learner(Transformer(cfg, rngs=nnx.Rngs(0)), plan.learner,
                              mesh=make_mesh(*mesh, jax.devices()[:devices]))
    memory = plan_memory(cfg, plan, 2, mesh=mesh)
    assert memory.masters == shard_bytes(state.params)
    assert memory.optimizer == shard_bytes(state.opt_state)
    assert memory.frozen == shard_bytes(state.frozen)
    assert memory.reference == (shard_bytes(state.reference) if state.reference else 0)
    assert (memory.reference > 0) == (not lora)  # the KL term's copy; with LoRA the base is it
    # the sampler's bf16 weights; f32 ones are the masters themselves
    assert memory.sampler_copy == (memory.masters // 2 if dtype == "bfloat16" else 0)
    if devices > 1:  # sharded: a device holds less than the whole
        assert memory.masters < nbytes(state.params) / 4


# f32 and bf16, remat none and full (with the KL reference the scale configs keep), with and
# without LoRA; 4 query heads and 12 (attention's temporaries grow with the heads).
@pytest.mark.parametrize("remat,dtype,lora,kl,heads", [("none", "float32", 0, 0.04, 4),
                                                       ("full", "float32", 0, 0.04, 4),
                                                       ("none", "bfloat16", 4, 0.04, 4),
                                                       ("none", "float32", 0, 0.0, 12)])
def test_update_matches_its_compiled_memory_analysis(remat, dtype, lora, kl, heads):
    config = run_config(**{"learner.lora.rank": lora, "learner.loss": {"kl_coef": kl}})
    plan = build_plan(config)
    cfg = model_cfg(param_dtype=dtype, dtype=dtype, remat=remat, num_heads=heads, head_dim=32)
    learner, state = create_learner(Transformer(cfg, rngs=nnx.Rngs(0)), plan.learner,
                                    mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    batch = learner.place(learner.ready(full_rows(plan, 8)))
    analysis = learner._step.lower(state, batch).compile().memory_analysis()
    memory = plan_memory(cfg, plan, 2, backend="cpu")
    assert memory.rows["learner_rows_per_micro_batch_per_device"] == 4
    resident = memory.masters + memory.optimizer + memory.frozen + memory.reference
    assert analysis.argument_size_in_bytes == pytest.approx(resident + nbytes(batch), rel=0.01)
    assert analysis.output_size_in_bytes == pytest.approx(resident, rel=0.01)  # the new state
    work = memory.gradients + memory.activations
    # XLA on the CPU computes bf16 elementwise work in f32 and keeps some of it: the bf16 plan,
    # counting 2 bytes as a GPU keeps them, is ~15% under the CPU's figure there.
    assert work == pytest.approx(analysis.temp_size_in_bytes, rel=0.10 if dtype == "float32"
                                 else 0.20)


def test_sampler_cache_and_prefill_match_its_programs():
    config = run_config()
    plan = build_plan(config)
    cfg = model_cfg()
    memory = plan_memory(cfg, plan, 2, backend="cpu")
    rows, slots = memory.rows["sampler_rows_per_device"], memory.rows["kv_slots"]
    assert slots == 256  # the 192-token episode and a 64-token reply, bucketed
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    sampler = Sampler(model, pad_id=0)
    seqs = sampler.empty(8, slots)
    assert memory.kv_cache == nbytes((seqs.state.cache.keys, seqs.state.cache.values))
    assert memory.sampler_copy == 0  # f32: the sampler reads the masters
    chunk = prefill_chunk(cfg, rows, slots)
    tokens = jnp.zeros((rows, chunk), jnp.int32)
    # the plan's worst case: a window of every slot (a row at the cache's end)
    analysis = sampler._prefill.lower(nnx.state(model), seqs.state, tokens, tokens.astype(bool),
                                      window=slots).compile().memory_analysis()
    assert prefill_bytes(cfg, rows, chunk, slots, 1) == pytest.approx(
        analysis.temp_size_in_bytes, rel=0.10)


def qwen_run():
    """configs/qwen2_5_1_5b_seet.py's run (1,024 episodes of up to 12,800 tokens, 8
    micro-batches) over the tiny shape: the arithmetic is the same, the shapes cheap."""
    config = load_config_file(ROOT / "configs" / "qwen2_5_1_5b_seet.py")
    config.model.path = ""
    return model_cfg(param_dtype="bfloat16", dtype="bfloat16", remat="full"), build_plan(config)


def test_a_plan_that_does_not_fit_is_refused_naming_the_changes():
    cfg, plan = qwen_run()
    memory = plan_memory(cfg, plan, 64, mesh=(1, 8, 1))
    options = alternatives(cfg, plan, 64, mesh=(1, 8, 1))
    assert options and all(other.peak < memory.peak for _, other in options)
    budget = int(memory.peak * 0.9)
    with pytest.raises(MemoryPlanError) as error:
        memory.check(budget, options)
    text = str(error.value)
    assert f"{memory.peak / GiB:.1f} GiB per device" in text
    assert f"{budget / GiB:.1f} GiB budget" in text and "the learner phase" in text
    for change in ("learner.mesh.fsdp=16 (16 devices)", "data.tasks_per_step=32",
                   "limits.max_episode_tokens=6144"):
        assert change in text
    fits = dict(options)["learner.mesh.fsdp=16 (16 devices)"]
    assert f"learner.mesh.fsdp=16 (16 devices): {fits.peak / GiB:.1f} GiB (fits)" in text
    memory.check(memory.peak)  # at its own peak it fits


def test_the_kv_cache_halves_with_the_rows_and_the_kv_heads():
    cfg, plan = qwen_run()
    one = plan_memory(cfg, plan, 64, mesh=(1, 8, 1))
    assert plan_memory(cfg, plan, 32, mesh=(1, 8, 1)).kv_cache == one.kv_cache // 2
    assert plan_memory(cfg, plan, 64, mesh=(1, 8, 2)).kv_cache == one.kv_cache // 2
    # 1,024 rows / 8 devices x 16,384 slots x 2 layers x K and V x 2 KV heads x 32 x 2 bytes
    assert one.kv_cache == 128 * 16384 * 2 * 2 * 2 * 32 * 2
    assert one.rows["kv_slots"] == 16384  # 12,288 + a 512-token reply, bucketed


def test_bad_inputs_are_named():
    assert parse_bytes("80GiB") == 80 * GiB and parse_bytes("40GB") == 40 * 10**9
    assert parse_mesh("fsdp=8") == (1, 8, 1) and mesh_sizes((-1, 2, 1), 8) == (4, 2, 1)
    with pytest.raises(ValueError, match="device memory '80 gigs'"):
        parse_bytes("80 gigs")
    with pytest.raises(ValueError, match=r"mesh 'fsdp=8,pipeline=2'"):
        parse_mesh("fsdp=8,pipeline=2")
    with pytest.raises(ValueError, match=r"6 devices do not divide into them"):
        mesh_sizes((-1, 4, 1), 6)
    config = run_config()
    with pytest.raises(ValueError, match="preset='qwen9'"):
        model_config_of(config, preset="qwen9")
    with pytest.raises(ValueError, match="config.model: no shape to plan with"):
        model_config_of(config, model_dir="/nonexistent")
    assert dataclasses.is_dataclass(plan_memory(model_cfg(), build_plan(config), 2))


def test_a_launch_is_checked_against_a_given_budget_and_skipped_without_one(embedded_dir):
    config = run_config()
    assert jax.devices()[0].memory_stats() is None  # the CPU reports no memory: nothing checked
    assert check_launch(config) is None
    memory = check_launch(config, budget=1 << 40)  # the embedded default's shape, planned
    assert memory.masters == build_embedded_shape_bytes(embedded_dir)
    with pytest.raises(MemoryPlanError, match=r"more than the 0\.0 GiB budget"):
        check_launch(config, budget=1 << 20)


def build_embedded_shape_bytes(model_dir) -> int:
    """f32 masters of the model at `model_dir`, loaded."""
    return nbytes(nnx.state(load_hf_checkpoint(model_dir), nnx.Param))


def test_branch_rows_are_planned_in_the_sampler_and_the_learner():
    cfg, plan = qwen_run()
    plain = plan_memory(cfg, plan, 16, mesh=(1, 8, 1))
    branching = dataclasses.replace(plan, rollout=dataclasses.replace(
        plan.rollout, branch=BranchConfig(points="every_call", k=1, max_forks=1)))
    assert episode_rows(branching, 16) == 2 * episode_rows(plan, 16)  # each episode and a branch
    two = plan_memory(cfg, branching, 16, mesh=(1, 8, 1))
    assert two.kv_cache == plan_memory(cfg, plan, 32, mesh=(1, 8, 1)).kv_cache > plain.kv_cache
    assert (two.rows["learner_rows_per_micro_batch_per_device"]
            > plain.rows["learner_rows_per_micro_batch_per_device"])


def test_async_plans_its_snapshots_and_both_phases_at_once():
    cfg, plan = qwen_run()
    k = plan.learner.mini_batches  # a lag of one step

    def with_schedule(**fields):
        return dataclasses.replace(plan, schedule=ScheduleConfig(**fields))

    sync = plan_memory(cfg, plan, 16, mesh=(1, 1, 1))
    weights = sync.sampler_copy + sync.frozen  # bf16 storage: the cast copy, no LoRA base
    assert weights > 0 and sync.snapshots == 0
    ahead = plan_memory(cfg, with_schedule(schedule="async", max_staleness=k), 16,
                        mesh=(1, 1, 1))
    assert ahead.sampler_copy == 0 and ahead.snapshots == 2 * weights  # played + newest
    assert ahead.peak == (sync.resident + 2 * weights + sync.gradients + sync.activations
                          + sync.kv_cache + sync.kv_copy + sync.sampler_work) > sync.peak
    further = plan_memory(cfg, with_schedule(schedule="async", max_staleness=3 * k), 16,
                          mesh=(1, 1, 1))
    assert further.snapshots == 4 * weights
    # a sampler on 4 devices of its own: no train state there, the weights whole, the rows split
    # 4 ways; the learner's devices hold no sampling figure
    split = plan_memory(cfg, with_schedule(schedule="async", max_staleness=k, sampler_devices=4),
                        16, mesh=(1, 4, 1))
    assert split.snapshots == 2 * weights
    assert split.kv_cache == plan_memory(cfg, plan, 16, mesh=(4, 1, 1)).kv_cache
    assert split.sampling_peak == (split.snapshots + split.kv_cache + split.kv_copy
                                   + split.sampler_work)
    assert split.learner_peak == split.resident + split.gradients + split.activations
    assert split.peak == max(split.learner_peak, split.sampling_peak)
    synced = plan_memory(cfg, with_schedule(sampler_devices=4), 16, mesh=(1, 4, 1))
    assert synced.sampler_copy == weights and synced.snapshots == 0  # one copy, placed there
    # the engine's sampler on devices of its own is tensor parallel: every row on each device,
    # the weights and the KV heads split 4 ways
    engine = dataclasses.replace(plan, rollout=dataclasses.replace(plan.rollout, mode="engine"),
                                 schedule=ScheduleConfig(sampler_devices=4))
    tensor = plan_memory(cfg, engine, 16, mesh=(1, 4, 1))
    assert tensor.kv_cache == plan_memory(cfg, plan, 16, mesh=(1, 1, 4)).kv_cache
    assert tensor.kv_cache > synced.kv_cache and tensor.sampler_copy < weights
