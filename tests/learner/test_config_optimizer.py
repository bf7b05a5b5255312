"""Learner configs by algorithm name, the optimizer chain, throughput and the metrics writer."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from seetjax.learner import ALGORITHMS, learner_config
from seetjax.learner.config import LearnerConfig, LossTerm, OptimizerConfig
from seetjax.learner.optimizer import learning_rate_schedule, make_optimizer
from seetjax.learner.throughput import throughput
from seetjax.losses.policy_gradient import PolicyGradientConfig
from seetjax.models.config import PRESETS
from seetjax.report.metrics import MetricsWriter


@pytest.mark.parametrize("algorithm", sorted(set(ALGORITHMS) - {"dr_grpo"}))
def test_every_preset_builds(algorithm):
    cfg = learner_config({"algorithm": algorithm})
    assert cfg.losses[0].name in ("policy_gradient", "sft", "dpo")


def test_overrides_and_counterfactual_weight():
    cfg = learner_config({"algorithm": "dapo", "loss": {"clip_high": 0.3},
                          "advantage": {"std": "batch"}, "counterfactual_weight": 0.2,
                          "counterfactual": {"preference_weight": 0.5}, "micro_batches": 4,
                          "mesh": {"data": 2, "fsdp": 2}, "lora": {"rank": 8},
                          "optimizer": {"learning_rate": 3e-6}})
    policy, cf = cfg.losses
    assert policy.config.clip_high == 0.3 and policy.config.clip_low == 0.2
    assert cfg.advantage_config.std == "batch" and cfg.advantage_config.filter_equal_groups
    assert (cf.name, cf.weight, cf.config.preference_weight) == ("counterfactual", 0.2, 0.5)
    assert cfg.mesh == (2, 2, 1) and cfg.lora.rank == 8 and cfg.optimizer.learning_rate == 3e-6
    assert cfg.needs_reference  # the counterfactual preference reads reference log-likelihoods
    hash(cfg)  # static under jit


@pytest.mark.parametrize("spec,field", [
    ({"algorithm": "dr_grpo"}, "norm_constant"),
    ({"algorithm": "grpo", "loss": {"clip_hihg": 0.3}}, "clip_hihg"),
    ({"algorithm": "grpo", "advantage": {"std": "max"}}, "std"),
    ({"algorithm": "grpo", "optimizer": {"learning_rate": -1.0}}, "learning_rate"),
    ({"algorithm": "grpo", "mesh": {"model": 2}}, "model"),
    ({"algorithm": "grpo", "micro_batches": 0}, "micro_batches"),
    ({"algorithm": "a2c"}, "algorithm"),
])
def test_invalid_configs_name_the_field(spec, field):
    with pytest.raises(ValueError, match=field):
        learner_config(spec)


def test_k1_kl_in_the_loss_is_rejected():
    """k1 in the loss has zero expected gradient (seetjax/losses/kl.py): only in the reward."""
    with pytest.raises(ValueError, match=r"learner\.loss\.kl_estimator.*zero expected gradient"):
        learner_config({"algorithm": "grpo", "loss": {"kl_estimator": "k1"}})
    with pytest.raises(ValueError, match="kl_estimator"):
        learner_config({"algorithm": "ppo", "loss": {"kl_in_reward": False}})
    with pytest.raises(ValueError, match="kl_estimator"):
        LearnerConfig((LossTerm("policy_gradient", 1.0, PolicyGradientConfig(
            kl_coef=0.1, kl_estimator="k1")),), advantage="grpo")
    # Allowed: k1 in the reward (PPO's preset), k1 without a penalty (a metric only), k2/k3.
    assert learner_config({"algorithm": "ppo"}).losses[0].config.kl_estimator == "k1"
    learner_config({"algorithm": "grpo", "loss": {"kl_estimator": "k1", "kl_coef": 0.0}})
    for estimator in ("k2", "k3"):
        learner_config({"algorithm": "grpo", "loss": {"kl_estimator": estimator}})


def test_a_turn_horizon_refuses_the_kl_in_the_reward():
    """The row's summed KL goes on its last reward: with returns that end with their turn, only
    the last turn would pay for every turn's KL."""
    turn = {"advantage": {"horizon": "turn"}}
    with pytest.raises(ValueError, match=r"advantage_config.horizon='turn': \(learner.advantage"
                                         r".horizon\) with kl_in_reward"):
        learner_config({"algorithm": "gigpo", "loss": {"kl_in_reward": True,
                                                       "kl_estimator": "k1"}, **turn})
    for spec in ({"algorithm": "gigpo", **turn}, {"algorithm": "grpo", **turn},
                 {"algorithm": "grpo", "loss": {"kl_in_reward": True, "kl_coef": 0.0}, **turn}):
        assert learner_config(spec).advantage_config.horizon == "turn"  # KL in the loss, or none


def test_schedule_warmup_then_cosine():
    schedule = learning_rate_schedule(OptimizerConfig(learning_rate=1.0, warmup_steps=4,
                                                      decay_steps=10, final_lr_fraction=0.1))
    lr = [float(schedule(s)) for s in (0, 2, 4, 9, 14, 20)]
    np.testing.assert_allclose(lr, [0.0, 0.5, 1.0, 0.1 + 0.9 * 0.5, 0.1, 0.1], atol=1e-6)


def test_adamw_clips_and_decays_matrices_only():
    params = nnx.State({"w": nnx.Param(jnp.ones((2, 2))), "b": nnx.Param(jnp.ones((2,)))})
    opt = make_optimizer(OptimizerConfig(learning_rate=0.1, weight_decay=0.5, max_grad_norm=1.0))
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = opt.update(zero, opt.init(params), params)
    assert float(updates["w"][...][0, 0]) == pytest.approx(-0.05)  # -lr * wd * w
    assert float(updates["b"][...][0]) == 0.0


def test_held_slices_never_change_and_everything_else_trains():
    params = nnx.State({"layers": {0: {"q": {"kernel": nnx.Param(jnp.ones((3, 4))),
                                             "bias": nnx.Param(jnp.ones((4,)))}}},
                        "w": nnx.Param(jnp.ones((2, 2)))})
    opt = make_optimizer(OptimizerConfig(learning_rate=0.1, weight_decay=0.5,
                                         held=(("layers.0.q.kernel", 2), ("layers.0.q.bias", 1))))
    grads = jax.tree.map(jnp.ones_like, params)
    state = opt.init(params)
    for _ in range(3):
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    kernel = np.asarray(params["layers"][0]["q"]["kernel"][...])
    np.testing.assert_array_equal(kernel[:, :2], 1.0)  # decay and gradient both held
    assert (kernel[:, 2:] < 1.0).all()
    bias = np.asarray(params["layers"][0]["q"]["bias"][...])
    assert bias[0] == 1.0 and (bias[1:] < 1.0).all()
    assert (np.asarray(params["w"][...]) < 1.0).all()
    wrong = make_optimizer(OptimizerConfig(learning_rate=0.1, held=(("layers.0.k.kernel", 1),)))
    with pytest.raises(ValueError, match=r"OptimizerConfig.held=\['layers.0.k.kernel'\]: no parameter"):
        wrong.update(grads, wrong.init(params), params)
    too_wide = make_optimizer(OptimizerConfig(learning_rate=0.1, held=(("w", 3),)))
    with pytest.raises(ValueError, match="w has 2 entries on its last axis, fewer than the 3"):
        too_wide.update(grads, too_wide.init(params), params)
    for bad, message in (((("w", 0),), "pairs, n >= 1"), (("w", 2), "pairs, n >= 1"),
                         ((("w", 1), ("w", 2)), "a path appears twice")):
        with pytest.raises(ValueError, match=f"OptimizerConfig.held=.*{message}"):
            OptimizerConfig(held=bad)


def test_throughput_mfu():
    cfg = PRESETS["tiny-qwen2"]
    out = throughput(tokens=4096, flop_tokens=3 * 4096, seconds=2.0, cfg=cfg, seq_len=512,
                     num_devices=1, peak_per_device=1e12)
    assert out["tokens_per_s"] == 2048
    assert out["mfu"] == pytest.approx(3 * cfg.flops_per_token(512) * 4096 / 2.0 / 1e12)
    assert "mfu" not in throughput(1, 3, 1.0, cfg, 8, 1, None)


def test_metrics_writer(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.write(1, {"loss": 0.5, "kl": np.float32(0.01)})
        writer.write(2, {"loss": float("nan")})  # a skipped step: still valid JSON
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "loss": 0.5, "kl": pytest.approx(0.01)},
                     {"step": 2, "loss": None}]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
