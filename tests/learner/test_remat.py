"""Remat ("full", "dots") in the learner's update: it traces where the model is merged from states
of an outer trace (the KL reference's and LoRA's frozen base, closed over by the jitted step's
`lax.map`/`lax.scan` bodies), and leaves the loss and gradients those of remat "none"."""

import pytest
from learner_testlib import assert_same_update, make_learner, moved_off_reference, rl_batch, tiny_model

KL = {"kl_coef": 0.1, "kl_estimator": "k3"}
LORA = {"rank": 4}
SETTINGS = [
    ("full", {"algorithm": "grpo", "loss": KL}),  # an in-step KL reference model
    ("full", {"algorithm": "grpo", "loss": {"kl_coef": 0.0}, "lora": LORA}),  # frozen base
    ("dots", {"algorithm": "grpo", "loss": KL, "lora": LORA, "micro_batches": 2}),  # both
]


@pytest.mark.parametrize("remat,spec", SETTINGS, ids=["full-kl", "full-lora", "dots-lora-kl"])
def test_remat_update_equals_no_remat(remat, spec):
    batch = rl_batch(seed=3)
    results = []
    for policy in ("none", remat):
        learner, state = make_learner(tiny_model(num_layers=1, remat=policy), spec)
        results.append(learner.gradients(moved_off_reference(state), batch))
    if spec["loss"]["kl_coef"]:  # the KL term is exercised, off its tie at the reference
        assert results[0][1]["kl"] > 1e-6
    assert_same_update(*results)
