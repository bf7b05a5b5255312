"""The sampler/learner mismatch metrics of an update (`objective.mismatch_metrics`): k1 and k3
estimates of KL(behaviour || learner) over the trained tokens, read before any update, against a
numpy reference on behaviour log-probs that differ from the learner's by known amounts."""

import numpy as np
from learner_testlib import make_learner, rl_batch

from seetjax.batch import target_mask


def test_mismatch_kl_is_read_on_the_first_mini_batch_before_its_update(model):
    learner, state = make_learner(model, {"algorithm": "grpo", "mini_batches": 2,
                                          "pack_rows": False,
                                          "optimizer": {"learning_rate": 1e-2}})
    batch = rl_batch(seed=3, rows=16)
    batch = batch.replace(rewards=(np.arange(16) % 4).astype(np.float32))  # every row kept
    seqs = batch.sequences
    mask = np.asarray(target_mask(seqs))
    learner_lp = np.asarray(learner.logprobs(state, seqs))
    delta = np.random.RandomState(0).normal(0.0, 0.3, mask.shape).astype(np.float32)
    behaviour = np.where(mask > 0, learner_lp + delta, 0.0).astype(np.float32)
    _, metrics = learner.update(state, batch.replace(old_logprobs=behaviour))
    first = mask[0::2]  # mini-batch 0 holds rows 0, 2, 4, ... (`RowChunks.split`)
    want_k1 = np.sum(first * delta[0::2]) / np.sum(first)
    want_k3 = np.sum(first * (np.expm1(-delta[0::2]) + delta[0::2])) / np.sum(first)
    np.testing.assert_allclose(metrics["mismatch_kl"], want_k1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(metrics["mismatch_k3"], want_k3, rtol=1e-4, atol=1e-6)
    assert want_k3 > 0.01  # a mismatch the alarm's default threshold sees
