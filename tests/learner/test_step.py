"""The jitted update: accumulation, compile count, non-finite skipping, every algorithm preset."""

import jax
import numpy as np
import pytest
from flax import nnx
from learner_testlib import flat_arrays, make_learner, rl_batch, tiny_model

from seetjax.batch import target_mask
from seetjax.models.transformer import Transformer


def _max_diff(a, b):
    fa, fb = flat_arrays(a), flat_arrays(b)
    assert fa.keys() == fb.keys()
    return max(float(np.max(np.abs(fa[k] - fb[k]))) for k in fa)


def test_accumulation_gives_the_global_weighted_mean(model):
    """4 micro-batches give the same loss and gradients as one, for a policy loss plus the
    counterfactual term (whose normalisers are pair tokens and pair weights)."""
    batch = rl_batch(seed=1, rows=16, pairs=8)
    spec = {"algorithm": "grpo", "counterfactual_weight": 0.5,
            "counterfactual": {"preference_weight": 1.0}}
    results = []
    for micro in (1, 4):
        learner, state = make_learner(model, {**spec, "micro_batches": micro})
        results.append(learner.gradients(state, batch))
    (g1, m1), (g4, m4) = results
    np.testing.assert_allclose(m4["loss"], m1["loss"], rtol=1e-5)
    assert _max_diff(g1, g4) <= 1e-5


def test_accumulation_is_not_a_mean_of_means(model):
    """SFT token-mean over micro-batches of unequal token counts: the accumulated loss is the
    global token mean, which the mean of the micro-batches' own means is not."""
    batch = rl_batch(seed=2, rows=8, padding_rows=0)
    learner, state = make_learner(model, {"algorithm": "sft", "micro_batches": 4})
    _, metrics = learner.gradients(state, batch)
    nll = -np.asarray(learner.logprobs(state, batch.sequences))
    mask = np.asarray(target_mask(batch.sequences))
    np.testing.assert_allclose(metrics["loss"], (nll * mask).sum() / mask.sum(), rtol=1e-5)
    # micro-batch c holds rows c, c + 4 (strided); their own token means average to another value
    chunk_means = [(nll[c::4] * mask[c::4]).sum() / mask[c::4].sum() for c in range(4)]
    assert abs(np.mean(chunk_means) - float(metrics["loss"])) > 1e-3


def test_step_compiles_once_and_counts_updates(model):
    # one-per-row rows and the LM head everywhere: these batches' shapes are equal (packed rows
    # compile once per bucketed row count, target widths once each: test_packing, test_targets)
    spec = {"algorithm": "dapo", "mini_batches": 2, "micro_batches": 2,
            "optimizer": {"learning_rate": 1e-3}, "pack_rows": False, "target_logits": False}
    learner, state = make_learner(model, spec)
    for seed in range(3):
        batch = rl_batch(seed=seed)
        state, metrics = learner.update(state, batch)
    assert learner.compile_count() == 1
    assert int(state.step) == 6 and int(state.skipped) == 0
    assert metrics["tokens_per_s"] > 0 and np.isfinite(metrics["loss"])
    seqs = batch.sequences
    real = (np.asarray(seqs.segment_ids) != 0).sum()
    assert metrics["padding_share"] == pytest.approx(1 - real / seqs.tokens.size)


def test_non_finite_update_is_skipped(model):
    learner, state = make_learner(model, {"algorithm": "grpo"})
    good = rl_batch(seed=3)
    state, _ = learner.step(state, good)  # the optimizer state is non-trivial from here on
    before = flat_arrays((state.params, state.opt_state))
    bad = good.replace(rewards=np.full_like(good.rewards, np.nan))
    state, metrics = learner.step(state, bad)
    after = flat_arrays((state.params, state.opt_state))
    assert int(metrics["skipped"]) == 1 and int(state.skipped) == 1 and int(state.step) == 1
    assert all(np.array_equal(before[k], after[k]) for k in before)
    state, metrics = learner.step(state, good)
    assert int(metrics["skipped"]) == 0 and int(state.step) == 2


# grpo + counterfactual and dapo run in the tests above; these cover the other code paths.
@pytest.mark.parametrize("spec", [
    {"algorithm": "ppo"},
    {"algorithm": "rloo", "loss": {"tis_cap": 2.0}, "mini_batches": 2},  # pre-update pass
    {"algorithm": "gspo"},
    {"algorithm": "sft", "loss": {"label_smoothing": 0.1}},
    {"algorithm": "dpo", "loss": {"kind": "ipo"}},
], ids=lambda s: s["algorithm"])
def test_every_algorithm_updates(spec, model, value_model):
    model = value_model if spec["algorithm"] == "ppo" else model
    learner, state = make_learner(model, spec)
    before = flat_arrays(state.params)
    state, metrics = learner.update(state, rl_batch(seed=4, pairs=16))
    assert metrics["skipped"] == 0 and np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    after = flat_arrays(state.params)
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_batch_validation_names_the_missing_field(model):
    learner, state = make_learner(model, {"algorithm": "grpo"})
    with pytest.raises(ValueError, match="group_ids"):
        learner.step(state, rl_batch().replace(group_ids=None))
    with pytest.raises(ValueError, match="multiple of 2"):
        make_learner(model, {"algorithm": "grpo", "micro_batches": 2})[0].step(
            state, rl_batch(rows=15))


def test_bf16_compute_with_f32_parameters(model):
    """Mixed precision: bf16 activations and matmuls, f32 parameters, optimizer and loss."""
    abstract = nnx.eval_shape(lambda: Transformer(model.config.replace(dtype="bfloat16"),
                                                  rngs=nnx.Rngs(0)))
    nnx.update(abstract, nnx.state(model))
    losses = []
    for m in (model, abstract):
        learner, state = make_learner(m, {"algorithm": "sft"})
        state, metrics = learner.update(state, rl_batch(seed=6))
        losses.append(metrics["loss"])
        assert all(x.dtype == np.float32 for x in jax.tree.leaves(state.params))
    np.testing.assert_allclose(losses[1], losses[0], rtol=2e-2)


def test_bf16_stored_models_train_f32_masters():
    """A model stored in bf16 (a real-model config's `model.dtype`) trains f32 master weights
    and f32 optimizer state: a tiny lr-1e-6 step moves almost every master weight, which bf16
    storage would round away; the sampler and the exported model get bf16 again."""
    import jax.numpy as jnp

    bf16 = tiny_model(seed=3, param_dtype="bfloat16", dtype="bfloat16")
    learner, state = make_learner(bf16, {"algorithm": "grpo", "loss": {"kl_coef": 0.0},
                                         "optimizer": {"learning_rate": 1e-6}})
    floats = [x for x in jax.tree.leaves((state.params, state.opt_state))
              if jnp.issubdtype(x.dtype, jnp.floating)]
    assert floats and all(x.dtype == jnp.float32 for x in floats)
    before = flat_arrays(state.params)
    state, _ = learner.update(state, rl_batch(seed=1))
    after = flat_arrays(state.params)
    changed = sum(int((before[k] != after[k]).sum()) for k in before)
    assert changed >= 0.9 * sum(v.size for v in before.values())
    sampled = learner.sampling_params(state)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(sampled))
    masters = dict(nnx.to_flat_state(state.params))
    for key, value in nnx.to_flat_state(sampled):
        np.testing.assert_array_equal(np.asarray(value.get_value()), np.asarray(
            masters[key].get_value().astype(jnp.bfloat16)), err_msg=str(key))


def test_f32_models_share_the_masters_with_the_sampler(model):
    learner, state = make_learner(model, {"algorithm": "sft"})
    sampled = dict(nnx.to_flat_state(learner.sampling_params(state)))
    for key, value in nnx.to_flat_state(state.params):
        assert sampled[key].get_value() is value.get_value(), key
