"""What is alive on the device when an RL update starts (`device/live_gib_at_update`,
seetjax.rl.step_figures): the train state the memory plan calls resident, and nothing the plan
calls sampling-only (the sampler's bf16 copy of the weights, its KV cache), nor the step-0
evaluation's. configs/scale_1_5b.py:tiny in bf16, so that the sampler's copy is arrays of its own
(in f32 it is the learner's own), through launch/train.py on one CPU device."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from seetjax.config.sections import load_config_file
from seetjax.models.transformer import Transformer
from seetjax.rl.config import build_plan
from seetjax.rl.memory_plan import model_config_of, plan_memory
from seetjax.rl.step_figures import live_bytes
from seetjax.sampling import Sampler
from tests.rl.test_memory_plan import model_cfg, nbytes, run_config

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
# Step 2's update starts after step 1's checkpoint save, which leaves the state's per-device
# shards as arrays of their own (views of the same buffers): counted once, as they are.
FLAGS = ["--config.model.dtype=bfloat16", "--config.model.compute_dtype=bfloat16",
         "--config.train.steps=2", "--config.train.checkpoint_every=1"]


def test_live_bytes_counts_each_buffer_once():
    devices = jax.devices()[:2]  # tests/conftest.py: eight CPU devices
    sharding = NamedSharding(Mesh(np.array(devices), ("x",)), PartitionSpec("x"))
    before = live_bytes(devices)
    array = jax.device_put(np.arange(2048, dtype=np.float32), sharding)
    views = [shard.data for shard in array.addressable_shards]  # new arrays, the same buffers
    assert all(v is not array for v in views)
    half = array.nbytes // 2
    assert live_bytes(devices) == {d: before[d] + half for d in devices}
    copy = jnp.copy(array)
    assert copy.sharding == sharding
    assert live_bytes(devices) == {d: before[d] + 2 * half for d in devices}


def test_an_array_deleted_after_it_was_listed_is_not_counted(monkeypatch):
    # a rollout playing ahead in another thread donates its cache while the step counts
    device = jax.devices()[0]
    kept, gone = jax.device_put(np.ones(256, np.float32), device), jax.device_put(
        np.ones(512, np.float32), device)
    gone.delete()
    monkeypatch.setattr(jax, "live_arrays", lambda: [gone, kept])
    assert live_bytes([device]) == {device: kept.nbytes}


def test_a_select_holds_a_second_cache_which_the_plan_counts():
    # Sampler.select gathers the rows it keeps (episodes that ended dropped, forks copied) into
    # a new cache: its program writes no output over its input, so both caches are alive.
    cfg = model_cfg()
    memory = plan_memory(cfg, build_plan(run_config()), 2, backend="cpu")
    sampler = Sampler(Transformer(cfg, rngs=nnx.Rngs(0)), pad_id=0)
    state = sampler.empty(8, memory.rows["kv_slots"]).state
    cache = nbytes((state.cache.keys, state.cache.values))
    analysis = sampler._take_rows.lower(state, jnp.arange(8)).compile().memory_analysis()
    assert analysis.alias_size_in_bytes == 0 and analysis.output_size_in_bytes >= cache
    assert memory.kv_copy == memory.kv_cache == cache


@pytest.mark.slow
def test_only_the_train_state_is_alive_when_the_update_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device
    out = subprocess.run(
        [sys.executable, "launch/train.py", "--config=configs/scale_1_5b.py:tiny",
         f"--workdir={tmp_path}", *FLAGS], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    live = [r["device/live_gib_at_update"] * 2**30 for r in rows if "stage" in r]

    config = load_config_file("configs/scale_1_5b.py", "tiny")
    config.model.dtype = config.model.compute_dtype = "bfloat16"
    memory = plan_memory(model_config_of(config), build_plan(config),
                         config.data.tasks_per_step, backend="cpu")
    # Beyond the state only the step's scalars (keys, counters: bytes) may be alive; 1 MiB is
    # far below each sampling-only part, so any one of them left alive fails.
    slack = MiB
    assert slack < min(memory.sampler_copy, memory.kv_cache) / 8
    assert memory.reference > 0 and memory.sampler_copy > 0  # both held, in bf16
    assert len(live) == 2
    np.testing.assert_array_less(np.full(2, memory.resident - 1), live)  # each array counted
    np.testing.assert_array_less(live, np.full(2, memory.resident + slack))
