"""The LM head at target positions only (`learner.target_logits`): the widths chosen, and for
every loss term the same loss, metrics and gradients as the head over whole rows."""

import numpy as np
import pytest
from learner_testlib import (
    VARIANTS,
    assert_same_update,
    make_learner,
    moved_off_reference,
    rl_batch,
    spec_id,
    widened,
)

from seetjax.batch import TokenSequences, target_mask
from seetjax.learner import learner_config
from seetjax.learner.packing import model_rows
from seetjax.learner.targets import target_counts, target_width


def test_target_counts_and_widths():
    seqs = TokenSequences.from_rows(
        [[5] * 10, [6] * 100, []], [[0.0] * 4 + [1.0] * 6, [1.0] * 70 + [0.0] * 30, []], 160)
    counts = target_counts(seqs)
    np.testing.assert_array_equal(counts, np.asarray(target_mask(seqs)).sum(1))
    assert counts.tolist() == [6, 69, 0]  # a segment's first token is never a target
    assert target_width(seqs) == 80  # 69 > 160 / 4 = 40: half the row
    fewer = seqs.replace(loss_mask=np.where(np.arange(160) < 20, seqs.loss_mask, 0))
    assert target_width(fewer) == 24  # 19 targets: 160 / 8 = 20, rounded up to a multiple of 8
    assert target_width(seqs.replace(loss_mask=seqs.loss_mask * 0)) == 16  # 160 / 16 = 10 -> 16
    full = seqs.replace(loss_mask=np.ones_like(seqs.loss_mask))
    assert target_width(full) == 0  # 99 > 80: the head everywhere


# One case per loss term and per reader of the model's outputs (entropy, KL, TIS, values, pairs).
@pytest.mark.parametrize("spec", VARIANTS, ids=spec_id)
@pytest.mark.parametrize("pack", [False, True], ids=["rows", "packed"])
def test_target_logits_give_the_full_loss_and_gradients(spec, pack, model, value_model):
    model = value_model if spec["algorithm"] == "ppo" else model
    batch = widened(rl_batch(seed=11, rows=16, pairs=8), width=256 if pack else 48)
    results = {}
    for targets in (False, True):
        learner, state = make_learner(model, {**spec, "pack_rows": pack,
                                              "target_logits": targets})
        results[targets] = learner.gradients(moved_off_reference(state), batch)
        ready = learner.ready(batch)
        widths = [r.target_width for r in model_rows(
            [ready.sequences, ready.pairs.chosen, ready.pairs.rejected])]
        assert all(widths) if targets else not any(widths)
    assert_same_update(results[False], results[True])


def test_one_compilation_per_width(model):
    learner, state = make_learner(model, {"algorithm": "grpo", "pack_rows": False})
    widths = []
    for seed in range(4):
        batch = rl_batch(seed=seed, rows=16, length=64)
        widths.append(learner.ready(batch).sequences.target_width)
        state, metrics = learner.update(state, batch)
        assert metrics["lm_head_share"] == widths[-1] / 64
    assert set(widths) <= {8, 16} and learner.compile_count() == len(set(widths))


def test_target_logits_is_validated():
    with pytest.raises(ValueError, match="target_logits"):
        learner_config({"algorithm": "grpo", "target_logits": 1})
