"""The pretrained embedded default ("embedded:base"): built by SFT on generated dialogs, cached,
the same bytes when rebuilt on this machine."""

import filecmp
import os

import numpy as np
import pytest

from seetjax.defaults.base_model import (
    EMBEDDED_BASE,
    BaseSpec,
    base_model_dir,
    base_sft_config,
    build_base_model,
    resolve_model_path,
    untrained_model_path,
)
from seetjax.models.hf import load_hf_checkpoint
from seetjax.sft.config import validate

SMALL = BaseSpec(tasks_per_category=1, steps=2, batch_size=8, seq_len=512)  # 8: the test devices


def test_the_base_config_is_a_valid_sft_run_on_generated_tasks(embedded_dir):
    config = base_sft_config(BaseSpec(), embedded_dir)
    validate(config)
    assert (config.data.source, config.data.split, config.data.generated.seed) == (
        "generated", "train", BaseSpec().stream_seed)
    assert config.data.generated.seed != 0  # not the stream runs train on by default
    # the copy-free tier, without miss_param (which needs a named value)
    assert config.data.generated.named_values is False
    assert config.data.categories == "base,miss_func,long_context"


def test_model_paths_resolve(embedded_dir, tmp_path):
    assert resolve_model_path("") == resolve_model_path("embedded") == embedded_dir
    assert resolve_model_path(str(tmp_path)) == tmp_path
    assert EMBEDDED_BASE == "embedded:base"
    # a run from the base reports the embedded default it was trained from as untrained
    assert untrained_model_path(EMBEDDED_BASE) == untrained_model_path("") == embedded_dir
    assert untrained_model_path(str(tmp_path)) == tmp_path


@pytest.mark.slow
def test_the_base_is_trained_cached_and_rebuilt_bit_identical(embedded_dir, tmp_path):
    path = base_model_dir(SMALL, cache_dir=tmp_path / "cache")
    before = os.stat(path / "model.safetensors").st_mtime_ns
    assert base_model_dir(SMALL, cache_dir=tmp_path / "cache") == path  # cached: not rebuilt
    assert os.stat(path / "model.safetensors").st_mtime_ns == before
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [path.name]

    again = build_base_model(tmp_path / "again", SMALL)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert filecmp.cmp(path / name, again / name, shallow=False), name
    tokens = (np.arange(1, 17)[None], np.arange(16)[None], np.ones((1, 16), np.int32))
    trained = np.asarray(load_hf_checkpoint(path)(*tokens)[0])
    initial = np.asarray(load_hf_checkpoint(embedded_dir)(*tokens)[0])
    assert np.abs(trained - initial).max() > 1e-3  # the SFT steps moved the weights
