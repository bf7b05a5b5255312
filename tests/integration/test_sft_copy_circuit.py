"""An SFT run with the copy circuit written in (`config.copy_circuit`): repeated-token rows join
every batch (drawn per step), the circuit heads' query and key projections end the run as they
were written, and a resumed run repeats the lost step exactly."""

import shutil

import numpy as np
import pytest
from flax import nnx

from configs.sft import get_config
from seetjax.data.pipeline import SFTPipeline
from seetjax.models.copy_circuit import install_copy_circuit
from seetjax.models.hf import load_hf_checkpoint
from seetjax.sft.config import pipeline_config, validate
from seetjax.sft.run import SFTRun


def _config(model_dir=""):
    config = get_config()
    config.model.path = str(model_dir)
    config.data.source = "qa_search"
    config.data.qa_search = dict(world_passages=40, max_hops=1, snippet_words=12, default_k=1)
    config.data.tasks_per_category = 8
    config.data.eval_split = ""
    config.data.seq_len = config.data.max_len = 512
    config.data.batch_size = 8  # 7 dialog rows + 1 copy row
    config.copy_circuit.install = True
    config.learner.optimizer.learning_rate = 1e-3
    config.train.steps, config.train.log_every, config.train.checkpoint_every = 3, 1, 2
    return config


@pytest.mark.slow
def test_the_circuit_is_held_copy_rows_train_and_a_resume_is_exact(tmp_path, embedded_dir):
    first = SFTRun(_config(embedded_dir), tmp_path)
    batch = next(iter(SFTPipeline(first.stages[0], pipeline_config(first.config, 0, 0))))
    assert batch["tokens"].shape == (7, 512)  # the dialogs' rows
    rows = first._with_copy_rows(batch, 5)
    assert rows["tokens"].shape == (8, 512)
    np.testing.assert_array_equal(rows["tokens"][:7], batch["tokens"])
    np.testing.assert_array_equal(rows["tokens"][7], first._with_copy_rows(batch, 5)["tokens"][7])
    assert not np.array_equal(rows["tokens"][7], first._with_copy_rows(batch, 6)["tokens"][7])
    assert rows["loss_mask"][7].sum() > 400  # the repeats train
    metrics = first.run()
    trained = nnx.state(load_hf_checkpoint(tmp_path / "model"), nnx.Param)
    written = load_hf_checkpoint(embedded_dir)
    install_copy_circuit(written)
    written = nnx.state(written, nnx.Param)
    d = first.learner.model_config.head_dim
    for layer in (0, 1):
        for proj in ("q_proj", "k_proj"):
            for part in ("kernel", "bias"):
                a = np.asarray(trained["layers"][layer]["self_attn"][proj][part][...])
                b = np.asarray(written["layers"][layer]["self_attn"][proj][part][...])
                np.testing.assert_array_equal(a[..., :d], b[..., :d])  # held
                assert not np.array_equal(a[..., d:], b[..., d:])  # the rest trained

    shutil.rmtree(tmp_path / "checkpoints" / "3")
    shutil.rmtree(tmp_path / "model")
    again = SFTRun(_config(embedded_dir), tmp_path).run()
    for key in ("loss", "grad_norm", "tokens"):
        assert again[key] == metrics[key], key


def test_bad_copy_circuit_settings_are_named():
    config = _config()
    config.copy_circuit.rows = -1
    with pytest.raises(ValueError, match="config.copy_circuit.rows=-1"):
        validate(config)
    config = _config()
    config.copy_circuit.rows = 8
    with pytest.raises(ValueError, match="must be below data.batch_size=8"):
        validate(config)
    config = _config()
    config.learner.lora.rank = 4
    with pytest.raises(ValueError, match="copy_circuit.install=True: with config.learner.lora"):
        validate(config)
