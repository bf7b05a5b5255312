"""Learner configuration: frozen, validated dataclasses (static under jit), built by algorithm name.

    cfg = learner_config({"algorithm": "dapo", "optimizer": {"learning_rate": 1e-6},
                          "counterfactual_weight": 0.1})

`learner_config` takes the nested mapping of an ml_collections `config.learner` section (or a plain
dict): the algorithm preset first, then the overrides; an unknown or invalid field fails with its
name before anything compiles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from seetjax import losses
from seetjax.errors import invalid, require
from seetjax.losses.registry import build_dataclass
from seetjax.models.lora import LoRAConfig


@dataclasses.dataclass(frozen=True)
class LossTerm:
    """One weighted term of the objective: a registered loss and its config."""

    name: str
    weight: float = 1.0
    config: Any = None  # None: the registered config class's defaults

    def __post_init__(self):
        require(self.name in losses.names("loss"), self, "name", self.name,
                f"one of {losses.names('loss')}")
        spec = losses.get(self.name)
        if self.config is None:
            object.__setattr__(self, "config", spec.config_cls())
        if not isinstance(self.config, spec.config_cls):
            raise invalid(self, "config", self.config, f"must be a {spec.config_cls.__name__} for loss "
                          f"{self.name!r}")
        if self.weight < 0:
            raise invalid(self, "weight", self.weight, f"must be >= 0 (loss {self.name!r})")

    @property
    def needs_reference(self) -> bool:
        return getattr(self.config, "needs_reference", False)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW (Loshchilov & Hutter 2019) after global-norm clipping, linear warmup to
    `learning_rate` then cosine decay to `final_lr_fraction` of it over `decay_steps`
    (0: constant after warmup). Weight decay skips vectors (norm scales, biases). `held`: slices
    no update changes, as (path, n) pairs: the first n entries of the last axis of the parameter
    at dotted `path` ("layers.0.self_attn.q_proj.kernel"), e.g. a written circuit's heads
    (`seetjax.models.copy_circuit.held_columns`). Their gradients still count in the global norm
    that clipping scales by."""

    learning_rate: float = 1e-6
    warmup_steps: int = 0
    decay_steps: int = 0
    final_lr_fraction: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # 0: no clipping
    held: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        held = tuple(tuple(pair) if isinstance(pair, (tuple, list)) else (pair,)
                     for pair in self.held)
        if any(len(pair) != 2 or not isinstance(pair[0], str) or isinstance(pair[1], bool)
               or not isinstance(pair[1], int) or pair[1] < 1 for pair in held):
            raise invalid(self, "held", self.held, "(path, n) pairs, n >= 1")
        if len({path for path, _ in held}) != len(held):
            raise invalid(self, "held", self.held, "a path appears twice")
        object.__setattr__(self, "held", held)
        for name in ("learning_rate", "warmup_steps", "decay_steps", "weight_decay",
                     "max_grad_norm", "eps"):
            if getattr(self, name) < 0:
                raise invalid(self, name, getattr(self, name), "must be >= 0")
        if not 0 <= self.final_lr_fraction <= 1:
            raise invalid(self, "final_lr_fraction", self.final_lr_fraction, "must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """losses: the objective's terms; advantage/advantage_config: the estimator run on rewards
    (None for SFT/DPO); mini_batches: optimizer updates per batch (PPO epochs over one rollout
    batch); micro_batches: gradient-accumulation steps per update; temperature: the sampler's (the
    learner scores tokens under softmax(logits / temperature)); logprob_chunk: sequence chunk of
    the LM head (0: whole rows); mesh: (data, fsdp, tensor) sizes, one may be -1; lora: adapters
    instead of full fine-tuning; peak_flops_per_device: for MFU (0: looked up by device kind);
    pack_rows: the model runs over the rows packed several to a row (`seetjax.learner.packing`;
    losses, gradients and log-probs equal the unpacked ones up to float rounding); target_logits:
    the LM head runs only at the positions that predict target tokens, the only ones any loss
    reads (`seetjax.learner.targets`; the same losses and gradients up to float rounding);
    share_prefixes: packed rows that begin alike hold their common leading tokens once, computed
    once (`seetjax.learner.prefix_tree`: a GRPO group's prompt, a branch row's history; the same
    losses and gradients up to float rounding; with pack_rows only). With several micro-batches
    or devices, rows are first regrouped within their mini-batch so that rows beginning alike
    share a micro-batch (`packing.sharing_order`): updates are unchanged, but the
    grad_variance metric then compares micro-batches of whole prompt groups.
    pairs_with_trajectories: with share_prefixes, the preference pairs' rows the model runs over
    are laid in the trajectories' packed rows, each beside the trajectory it begins like, and
    computed in the same pass (a SEET pair is a failed episode's prefix and one step: it then
    costs its step; `packing.with_riders`); only when the trajectories are trained too."""

    losses: tuple[LossTerm, ...]
    advantage: str | None = None
    advantage_config: Any = None
    optimizer: OptimizerConfig = OptimizerConfig()
    mini_batches: int = 1
    micro_batches: int = 1
    temperature: float = 1.0
    logprob_chunk: int = 0
    mesh: tuple[int, int, int] = (-1, 1, 1)
    lora: LoRAConfig | None = None
    peak_flops_per_device: float = 0.0
    pack_rows: bool = True
    target_logits: bool = True
    share_prefixes: bool = True
    pairs_with_trajectories: bool = True

    def __post_init__(self):
        object.__setattr__(self, "losses", tuple(self.losses))
        object.__setattr__(self, "mesh", tuple(self.mesh))
        if not self.losses:
            raise invalid(self, "losses", self.losses, "at least one loss term is needed")
        names = [t.name for t in self.losses]
        if len(set(names)) != len(names):
            raise invalid(self, "losses", names, "a loss appears twice")
        if self.advantage is not None:
            require(self.advantage in losses.names("advantage"), self, "advantage", self.advantage,
                    f"one of {losses.names('advantage')}")
            spec = losses.get(self.advantage, kind="advantage")
            if self.advantage_config is None:
                object.__setattr__(self, "advantage_config", spec.config_cls())
            if not isinstance(self.advantage_config, spec.config_cls):
                raise invalid(self, "advantage_config", self.advantage_config,
                              f"must be a {spec.config_cls.__name__} for advantage "
                              f"{self.advantage!r}")
        for name in ("mini_batches", "micro_batches"):
            if getattr(self, name) < 1:
                raise invalid(self, name, getattr(self, name), "must be >= 1")
        if self.temperature <= 0:
            raise invalid(self, "temperature", self.temperature, "must be > 0 (the sampler's "
                          "temperature; greedy rollouts are scored at 1.0)")
        if self.logprob_chunk < 0:
            raise invalid(self, "logprob_chunk", self.logprob_chunk, "must be >= 0")
        for name in ("pack_rows", "target_logits", "share_prefixes",
                     "pairs_with_trajectories"):
            if not isinstance(getattr(self, name), bool):
                raise invalid(self, name, getattr(self, name), "must be True or False")
        if len(self.mesh) != 3 or self.mesh.count(-1) > 1:
            raise invalid(self, "mesh", self.mesh, "(data, fsdp, tensor), at most one -1")
        policy = self.term("policy_gradient")
        if policy is not None and self.advantage is None:
            raise invalid(self, "advantage", None, "the policy_gradient loss needs an advantage "
                          "estimator (or pass precomputed batch.advantages with 'reinforce')")
        if (policy is not None and policy.config.kl_estimator == "k1" and policy.config.kl_coef > 0
                and not policy.config.kl_in_reward):
            raise invalid(
                self, "losses[policy_gradient].kl_estimator", "k1",
                "(learner.loss.kl_estimator) with kl_in_reward=False: k1 in the loss has zero "
                "expected gradient, so the KL penalty would do nothing; use 'k2' (gradient of "
                "KL(pi || ref)) or 'k3' (gradient of KL(ref || pi)) in the loss, or set kl_in_reward=True "
                "(see seetjax/losses/kl.py)")
        if (policy is not None and policy.config.kl_in_reward and policy.config.kl_coef > 0
                and getattr(self.advantage_config, "horizon", "episode") == "turn"):
            raise invalid(self, "advantage_config.horizon", "turn",
                          "(learner.advantage.horizon) with kl_in_reward: the row's summed KL is "
                          "charged on its last reward, which only the last turn's returns would "
                          "see; put the KL in the loss (kl_in_reward=False)")
        if policy is None and self.advantage is not None:
            raise invalid(self, "advantage", self.advantage,
                          "only the policy_gradient loss uses advantages")
        if self.term("value") is not None and not getattr(self.advantage_config, "needs_values",
                                                          False):
            raise invalid(self, "advantage", self.advantage,
                          "the value loss needs a token-level estimator ('gae')")

    def term(self, name: str) -> LossTerm | None:
        return next((t for t in self.losses if t.name == name), None)

    @property
    def needs_reference(self) -> bool:
        """Whether some term reads reference log-probs (the learner then keeps a reference)."""
        return any(t.needs_reference for t in self.losses)


# Algorithm presets: (loss terms as {name: (weight, config fields)}, advantage, advantage fields).
ALGORITHMS: dict[str, tuple[dict[str, tuple[float, dict]], str | None, dict]] = {
    # DeepSeekMath (Shao et al. 2024): group-normalised advantages, k3 KL in the loss,
    # per-sequence token means.
    "grpo": ({"policy_gradient": (1.0, dict(kl_coef=0.04, aggregation="seq-mean-token-mean"))},
             "grpo", {}),
    # DAPO (Yu et al. 2025): clip-higher, no KL, token-mean, groups without signal dropped.
    "dapo": ({"policy_gradient": (1.0, dict(clip_low=0.2, clip_high=0.28))},
             "grpo", dict(filter_equal_groups=True)),
    # Dr. GRPO (Liu et al. 2025): no std, token sums over a fixed normaliser (set loss.norm_constant
    # to the generation budget).
    "dr_grpo": ({"policy_gradient": (1.0, dict(aggregation="seq-mean-token-sum-norm"))},
                "grpo", dict(std="none")),
    # GSPO (Zheng et al. 2025): sequence-level ratio, tiny clip range.
    "gspo": ({"policy_gradient": (1.0, dict(ratio_level="sequence", clip_low=3e-4, clip_high=4e-4,
                                            aggregation="seq-mean-token-mean"))}, "grpo", {}),
    # GiGPO (Feng et al. 2025): GRPO's loss, plus step advantages within groups of equal states.
    "gigpo": ({"policy_gradient": (1.0, dict(kl_coef=0.04, aggregation="seq-mean-token-mean"))},
              "gigpo", {}),
    "rloo": ({"policy_gradient": (1.0, {})}, "rloo", {}),
    "reinforce": ({"policy_gradient": (1.0, dict(clip_low=None, clip_high=None))},
                  "reinforce", {}),
    # PPO as in InstructGPT (Ouyang et al. 2022): KL folded into the reward, GAE, value loss.
    "ppo": ({"policy_gradient": (1.0, dict(kl_coef=0.05, kl_estimator="k1", kl_in_reward=True)),
             "value": (0.5, {})}, "gae", {}),
    "sft": ({"sft": (1.0, {})}, None, {}),
    "dpo": ({"dpo": (1.0, {})}, None, {}),
}

_MAIN_LOSS = {name: next(iter(terms)) for name, (terms, _, _) in ALGORITHMS.items()}


def learner_config(spec: Mapping[str, Any]) -> LearnerConfig:
    """LearnerConfig from a nested mapping:

    algorithm: a key of ALGORITHMS; loss: overrides of its main loss's config; advantage:
    overrides of its estimator's config; value, value_weight: PPO's value term;
    counterfactual_weight (lambda_cf, 0 = off), counterfactual: the SEET counterfactual term;
    optimizer: OptimizerConfig fields; lora: LoRAConfig fields (rank 0 = off); mesh: {data, fsdp,
    tensor}; and mini_batches, micro_batches, temperature, logprob_chunk, peak_flops_per_device,
    pack_rows, target_logits, share_prefixes, pairs_with_trajectories.
    """
    spec = dict(spec)
    algorithm = spec.pop("algorithm", "grpo")
    if algorithm not in ALGORITHMS:
        raise invalid("learner", "algorithm", algorithm, f"one of {sorted(ALGORITHMS)}")
    presets, advantage, advantage_fields = ALGORITHMS[algorithm]
    overrides = {_MAIN_LOSS[algorithm]: dict(spec.pop("loss", {})),
                 "value": dict(spec.pop("value", {})),
                 "counterfactual": dict(spec.pop("counterfactual", {}))}
    weights = {"value": spec.pop("value_weight", None),
               "counterfactual": spec.pop("counterfactual_weight", 0.0)}
    for name, weight in weights.items():
        if weight is not None and not weight >= 0:
            raise invalid("learner", f"{name}_weight", weight, "must be >= 0 (0: off)")
    terms = []
    for name, (weight, fields) in presets.items():
        terms.append(_term(name, weights.get(name) or weight, {**fields, **overrides[name]}))
    if weights["counterfactual"]:
        terms.append(_term("counterfactual", weights["counterfactual"],
                           overrides["counterfactual"]))
    fields: dict[str, Any] = dict(losses=tuple(terms), advantage=advantage)
    if advantage is not None:
        fields["advantage_config"] = losses.make_config(
            advantage, {**advantage_fields, **dict(spec.pop("advantage", {}))}, kind="advantage")
    if "optimizer" in spec:
        fields["optimizer"] = build_dataclass(OptimizerConfig, dict(spec.pop("optimizer")))
    lora = dict(spec.pop("lora", {}))
    if isinstance(lora.get("targets"), str):  # "q_proj,v_proj", as run configs give it
        lora["targets"] = [t.strip() for t in lora["targets"].split(",") if t.strip()]
    lora = {k: tuple(v) if k == "targets" else v for k, v in lora.items()}
    if lora.get("rank", 0):
        fields["lora"] = build_dataclass(LoRAConfig, lora)
    elif lora:  # rank 0: LoRA off, but a bad alpha/dropout/targets still fails, named
        build_dataclass(LoRAConfig, {**lora, "rank": 1})
    if "mesh" in spec:
        mesh = dict(spec.pop("mesh"))
        fields["mesh"] = (mesh.pop("data", -1), mesh.pop("fsdp", 1), mesh.pop("tensor", 1))
        if mesh:
            raise invalid("learner", "mesh", dict(mesh), f"has no field(s) {sorted(mesh)}; known: "
                          "data, fsdp, tensor")
    return build_dataclass(LearnerConfig, {**spec, **fields})


def _term(name: str, weight: float, fields: Mapping[str, Any]) -> LossTerm:
    return LossTerm(name, float(weight), losses.make_config(name, fields))
