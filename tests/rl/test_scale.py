"""What runs the RL loop at a real model's size (docs/scale.md, "The RL loop at scale"): a preset's
random weights as the start model (seetjax.rl.start_model), the scale configs validated, and the
per-step figures (rollout tokens/s, device memory's peak, compile counts) and their table."""

import dataclasses
import json

import jax
import numpy as np
import pytest
from flax import nnx

from seetjax.config.sections import load_config_file
from seetjax.models import config as model_config
from seetjax.rl.config import build_plan, default_config
from seetjax.rl.report import step_figures_table
from seetjax.rl.start_model import start_model
from seetjax.rl.step_figures import peak_memory_gib
from seetjax.rollout.result import PlayTimes
from seetjax.sampling import Completion

TINY = {"path": "", "preset": "tiny-qwen2", "dtype": "bfloat16", "compute_dtype": "float32",
        "remat": "none"}


def test_a_preset_is_its_shape_with_the_tokenizers_ids_and_seeded_weights(embedded_dir):
    hf = json.loads((embedded_dir / "config.json").read_text())
    model = start_model(embedded_dir, TINY, seed=3)
    cfg, preset = model.config, model_config.PRESETS["tiny-qwen2"]
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers) == (8192, 256, 4)  # not the 4,096
    assert cfg.vocab_size > hf["vocab_size"] and cfg.num_kv_heads == preset.num_kv_heads
    assert (cfg.eos_token_id, cfg.pad_token_id) == (hf["eos_token_id"], hf["pad_token_id"])
    assert (cfg.param_dtype, cfg.dtype) == ("bfloat16", "float32")
    weights = nnx.state(model)["embed_tokens"]["embedding"].get_value()
    assert weights.dtype == jax.numpy.bfloat16
    again = nnx.state(start_model(embedded_dir, TINY, seed=3))["embed_tokens"]["embedding"].get_value()
    other = nnx.state(start_model(embedded_dir, TINY, seed=4))["embed_tokens"]["embedding"].get_value()
    np.testing.assert_array_equal(np.asarray(weights, np.float32), np.asarray(again, np.float32))
    assert not np.array_equal(np.asarray(weights, np.float32), np.asarray(other, np.float32))


def test_a_preset_smaller_than_the_tokenizer_takes_its_vocabulary(embedded_dir, monkeypatch):
    small = dataclasses.replace(model_config.PRESETS["tiny-qwen2"], vocab_size=1000)
    monkeypatch.setitem(model_config.PRESETS, "small", small)
    model = start_model(embedded_dir, {**TINY, "preset": "small"}, seed=0)
    assert model.config.vocab_size == 4096  # every token id of the tokenizer has a row


def test_bad_presets_fail_before_anything_loads():
    config = default_config()
    config.model.preset = "qwen9"
    with pytest.raises(ValueError, match=r"config\.model: preset='qwen9': not one of"):
        build_plan(config)
    config.model.preset = "tiny-qwen2"
    config.sft.enabled = True
    with pytest.raises(ValueError, match=r"config\.model\.preset='tiny-qwen2'.*sft\.enabled=False"):
        build_plan(config)


@pytest.mark.parametrize("arg", ["1.5b", "tiny"])
def test_the_1_5b_config_validates_at_both_sizes(arg):
    config = load_config_file("configs/scale_1_5b.py", arg)
    plan = build_plan(config)
    assert config.model.preset == {"1.5b": "qwen2.5-1.5b", "tiny": "tiny-qwen2"}[arg]
    assert plan.learner.needs_reference and plan.max_pairs == plan.learner.micro_batches
    assert plan.stages[-1].stage == 4 and len(plan.stages) == 4


def test_the_1_5b_config_refuses_an_unknown_size():
    with pytest.raises(ValueError, match="'1.5b' or 'tiny'"):
        load_config_file("configs/scale_1_5b.py", "7b")


def test_the_7b_lora_config_validates():
    config = load_config_file("configs/scale_7b_lora.py")
    plan = build_plan(config)
    assert config.model.preset == "qwen2.5-7b" and plan.learner.lora.rank == 64
    assert config.model.dtype == "bfloat16" and config.model.remat == "full"
    rows = config.data.tasks_per_step * config.rollout.group_size
    assert rows % plan.learner.micro_batches == 0


def test_rollout_tokens_per_second_are_the_replies_tokens_over_sampling_time():
    times = PlayTimes(sampling_s=2.0)
    times.add_call([Completion(tokens=[1] * 6, logprobs=[0.0] * 6, finish_reason="length"),
                    Completion(tokens=[1] * 4, logprobs=[0.0] * 4, finish_reason="stop")])
    assert times.metrics()["tokens_per_s"] == 5.0
    assert PlayTimes().metrics()["tokens_per_s"] == 0.0  # no sampling yet: no rate


class _Device:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_peak_memory_is_the_largest_devices_and_none_without_figures():
    devices = [_Device({"peak_bytes_in_use": 3 << 30}), _Device({"peak_bytes_in_use": 5 << 30}),
               _Device(None)]
    assert peak_memory_gib(devices) == 5.0
    assert peak_memory_gib([_Device(None), _Device({})]) is None
    assert peak_memory_gib() is None  # the CPU keeps no memory figures


def test_the_figures_table_says_what_was_not_measured_and_why():
    gpu = {"time/rollout_tokens_per_s": 1000.0, "learner/tokens_per_s": 3000.0,
           "learner/mfu": 0.4, "device/peak_memory_gib": 61.25, "compile/learner": 2.0,
           "compile/sampler": 9.0}
    line = step_figures_table([gpu, {**gpu, "learner/mfu": 0.2, "device/peak_memory_gib": 70.0}])
    assert line[-1] == "| 1,000 | 3,000 | 30.0% | 70.0 GiB | 2 / 9 |"
    cpu = {k: v for k, v in gpu.items() if k not in ("learner/mfu", "device/peak_memory_gib")}
    line = step_figures_table([cpu])[-1]
    assert "n/a (peak FLOP/s of the device unknown)" in line
    assert "n/a (no memory figures from the backend: the CPU)" in line
