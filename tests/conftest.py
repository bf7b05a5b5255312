"""Shared fixtures: tiny random HF checkpoints (made by transformers), the embedded default."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Eight simulated CPU devices so sharding tests run here; single-device code is unaffected.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from seetjax.runtime.cache import MIN_COMPILE_SECONDS, enable_compilation_cache  # noqa: E402
from tests.tolerances import EXACT_F32_PACKAGES, exact_f32  # noqa: E402

# Every test process (xdist workers, the launches tests start) reads programs compiled before:
# scripts that never call enable_compilation_cache (the learner's workers) through JAX's own
# variables, which child processes inherit.
if str(_cache := enable_compilation_cache()) != ".":
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_cache))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(MIN_COMPILE_SECONDS))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # The model, sampler and learner tests compare f32 math with references: on a GPU (TF32 by
    # default) their matmuls, fixtures' included, run at f32; on the CPU nothing changes.
    package = Path(item.path).relative_to(Path(__file__).parent).parts[0]
    if package not in EXACT_F32_PACKAGES:
        yield
        return
    with exact_f32():
        yield


def pytest_collection_modifyitems(items):
    # xdist hands tests out in collection order: the long end-to-end runs (marked slow) go first,
    # so the short ones fill the workers' last minutes instead of one worker ending on a 2-minute
    # run while the other waits.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)

def _random_hf_model(kind: str, out_dir, vocab_size: int = 512, positions: int = 256) -> str:
    """A tiny random Qwen2 or Llama-3 model saved by transformers, with non-zero biases."""
    import torch
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1)
    if kind == "qwen2":
        config = transformers.Qwen2Config(
            tie_word_embeddings=True, max_position_embeddings=positions,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    else:
        config = transformers.LlamaConfig(
            tie_word_embeddings=False, attention_bias=True, max_position_embeddings=16384,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}, **common)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1)
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    model.save_pretrained(out_dir)
    return str(out_dir)


@pytest.fixture(scope="session")
def hf_qwen2_dir(tmp_path_factory):
    return _random_hf_model("qwen2", tmp_path_factory.mktemp("hf_qwen2"))


@pytest.fixture(scope="session")
def hf_llama_dir(tmp_path_factory):
    return _random_hf_model("llama", tmp_path_factory.mktemp("hf_llama"))


@pytest.fixture(scope="session")
def embedded_dir():
    from seetjax.defaults.embedded import embedded_model_dir
    return embedded_model_dir()


@pytest.fixture(scope="session")
def small_dir(tmp_path_factory, tokenizer):
    """A tiny random Qwen2 over the embedded tokenizer's vocabulary: for the learner's contract
    with the rollout side, where trained weights do not matter and the embedded model's width
    and depth only cost compile and step time."""
    return _random_hf_model("qwen2", tmp_path_factory.mktemp("small"), len(tokenizer),
                            positions=8192)


@pytest.fixture(scope="session")
def tokenizer(embedded_dir):
    from seetjax.models.tokenizer import Tokenizer
    return Tokenizer.from_pretrained(embedded_dir)


@pytest.fixture(scope="session")
def padded_batch():
    """Token ids [3, 12] with left padding, right padding and no padding, and their mask."""
    rng = np.random.RandomState(0)
    tokens = rng.randint(0, 512, (3, 12))
    mask = np.ones((3, 12), np.int32)
    mask[1, :4] = 0  # left padding
    mask[2, 9:] = 0  # right padding
    return tokens, mask
