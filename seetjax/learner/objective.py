"""The objective: what is computed once per batch before any update (frozen reference log-probs,
behaviour values, the learner's own old log-probs, advantages), and the weighted sum of the
registered loss terms on one micro-batch.

Every loss of a micro-batch is normalised by totals of its whole mini-batch (`Totals`), so summing
micro-batch losses and gradients gives the mini-batch's global weighted mean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from seetjax import losses
from seetjax.batch import TokenSequences, TrajectoryBatch, row_mask, target_mask
from seetjax.learner.config import LearnerConfig
from seetjax.learner.forward import Outputs, masked_sums, shared_outputs
from seetjax.learner.packing import rides
from seetjax.losses.advantages import credit_to_trained, estimator_inputs, last_position, outcome_rewards
from seetjax.losses.aggregation import Denominators, masked_mean

Array = jax.Array
sg = jax.lax.stop_gradient


@struct.dataclass
class Prepared:
    """The batch with everything fixed before the update. mask: [B, T] loss mask of the
    trajectories (target tokens x kept rows); advantages: [B] (given in the batch) or [B, T];
    returns: [B, T] (PPO); proximal: [B, T] the learner's log-probs under the pre-update
    parameters (TIS)."""

    batch: TrajectoryBatch
    mask: Array | None = None
    advantages: Array | None = None
    returns: Array | None = None
    proximal: Array | None = None


@struct.dataclass
class Totals:
    """Normalisers of one mini-batch: its trajectory tokens/sequences, its pairs' weighted
    chosen tokens, and its pairs' total weight."""

    tokens: Denominators | None
    pair_tokens: Denominators | None
    pair_weight: Array | None


def pair_masks(batch: TrajectoryBatch) -> tuple[Array, Array]:
    return target_mask(batch.pairs.chosen), target_mask(batch.pairs.rejected)


def batch_totals(prepared: Prepared) -> Totals:
    """The totals of a (mini-)batch whose leaves have rows on axis 0."""
    tokens = None if prepared.mask is None else Denominators.of(prepared.mask)
    pair_tokens = pair_weight = None
    if prepared.batch.pairs is not None:
        weights = prepared.batch.pairs.weights
        pair_tokens = Denominators.of(pair_masks(prepared.batch)[0] * weights[:, None])
        pair_weight = jnp.sum(weights)
    return Totals(tokens, pair_tokens, pair_weight)


class StepModel:
    """The model as one update runs it: the graph def, the frozen states around the trainable
    ones and the reference states; the trainable states come in as an argument."""

    def __init__(self, graphdef: nnx.GraphDef, frozen: nnx.State, reference: tuple[nnx.State, ...],
                 config: LearnerConfig):
        self.graphdef, self.frozen, self.reference, self.config = graphdef, frozen, reference, config

    def outputs(self, states: tuple[nnx.State, ...], seqs, **kw) -> Outputs:
        return self.shared(states, seqs, **kw)[0]

    def shared(self, states: tuple[nnx.State, ...], seqs, riders=(), **kw) -> tuple[Outputs, ...]:
        """The outputs of `seqs` and of the row sets riding in its packed rows, one pass."""
        return shared_outputs(self.graphdef, states, seqs, riders,
                              temperature=self.config.temperature,
                              chunk=self.config.logprob_chunk, **kw)


def pair_riders(cfg: LearnerConfig) -> tuple[str, ...]:
    """The pair row sets that ride in the trajectories' packed rows (`pairs_with_trajectories`):
    those the model runs over (with gradients or for reference sums), when it runs over the
    trajectories with gradients too, so that one pass serves both."""
    trained, needs = _trained_rows(cfg), _pair_reference_needed(cfg)
    if not (cfg.pack_rows and cfg.share_prefixes and cfg.pairs_with_trajectories
            and trained["sequences"]):
        return ()
    return tuple(name for name in ("chosen", "rejected") if trained[name] or needs)


def _pair_reference_needed(cfg: LearnerConfig) -> bool:
    """Whether a pair loss reads the reference model's log-likelihoods of the pairs."""
    return any(cfg.term(n) is not None and cfg.term(n).needs_reference
               for n in ("dpo", "counterfactual"))


def _prepass_needs(cfg: LearnerConfig, batch: TrajectoryBatch) -> dict[str, bool]:
    """Which no-gradient passes `prepare` runs: reference log-probs of the trajectories, the
    behaviour values, the learner's own old log-probs (TIS), reference log-likelihoods of pairs."""
    policy, value = cfg.term("policy_gradient"), cfg.term("value")
    pair_ref = _pair_reference_needed(cfg)
    return {"ref": policy is not None and policy.needs_reference and batch.ref_logprobs is None,
            "values": value is not None and batch.old_values is None,
            # With one update per batch the pre-update log-probs are the update's own (detached).
            "proximal": (policy is not None and policy.config.tis_cap is not None
                         and cfg.mini_batches > 1),
            "pair_ref": pair_ref and batch.pairs.ref_chosen is None}


def _trained_rows(cfg: LearnerConfig) -> dict[str, bool]:
    """Which rows `micro_objective` runs the model over with gradients."""
    names = {t.name for t in cfg.losses}
    cf = cfg.term("counterfactual")
    return {"sequences": bool(names & set(_SEQUENCE_TERMS)),
            "chosen": bool(names & {"dpo", "counterfactual"}),
            "rejected": "dpo" in names or (cf is not None and cf.config.preference_weight > 0)}


def flop_tokens(cfg: LearnerConfig, batch: TrajectoryBatch) -> Array:
    """Real tokens weighted by forward-pass equivalents: 3 for a forward + backward pass, 1 for a
    no-gradient pass (FLOPs = this x `ModelConfig.flops_per_token`). The tokens the model runs
    over: of the packed rows when packed, a shared prefix's once."""

    def count(s: TokenSequences) -> Array:
        if rides(s):  # its slots are the trajectories' packed rows', counted there
            return jnp.zeros((), jnp.float32)
        rows = s if s.packing is None else s.packing.rows
        return jnp.sum(rows.segment_ids != 0).astype(jnp.float32)

    needs, trained = _prepass_needs(cfg, batch), _trained_rows(cfg)
    total = jnp.zeros((), jnp.float32)
    if batch.sequences is not None:
        # pairs riding in the trajectories' rows take their reference pass there too
        riding = batch.pairs is not None and rides(batch.pairs.chosen)
        reference = needs["ref"] or (riding and needs["pair_ref"])
        passes = 3 * trained["sequences"] + reference + needs["values"] + needs["proximal"]
        total += passes * count(batch.sequences)
    if batch.pairs is not None:
        total += (3 * trained["chosen"] + needs["pair_ref"]) * count(batch.pairs.chosen)
        total += (3 * trained["rejected"] + needs["pair_ref"]) * count(batch.pairs.rejected)
    return total


def prepare(model: StepModel, params: nnx.State, batch: TrajectoryBatch, chunks: int,
            map_rows: Callable[[Callable, Any, int], Any]) -> tuple[Prepared, dict]:
    """Fills what the loss terms need and the batch lacks (no gradients flow here), then runs
    the advantage estimator. `map_rows(f, tree, chunks)` applies f chunk by chunk over rows."""
    cfg = model.config
    needs = _prepass_needs(cfg, batch)
    current = (params, model.frozen)
    seqs = batch.sequences
    if needs["pair_ref"]:
        batch = _pair_reference(model, batch, chunks, map_rows, needs["ref"])
    if needs["ref"] and batch.ref_logprobs is None:
        ref = map_rows(lambda s: model.outputs(model.reference, s).logprobs, seqs, chunks)
        batch = batch.replace(ref_logprobs=sg(ref))
    if needs["values"]:
        values = map_rows(lambda s: model.outputs(current, s, values=True).values, seqs, chunks)
        batch = batch.replace(old_values=sg(values))
    prepared = Prepared(batch=batch, mask=None if seqs is None else target_mask(seqs))
    if needs["proximal"]:
        proximal = map_rows(lambda s: model.outputs(current, s).logprobs, seqs, chunks)
        prepared = prepared.replace(proximal=sg(proximal))
    metrics: dict[str, Array] = {}
    if cfg.advantage is not None:
        prepared, metrics = _advantages(prepared, cfg)
    return prepared, metrics


def _pair_reference(model: StepModel, batch: TrajectoryBatch, chunks: int, map_rows,
                    trajectories: bool) -> TrajectoryBatch:
    """`batch` with its pairs' reference log-likelihoods; where the pairs ride in the
    trajectories' rows, from one reference pass over those rows, which also gives the
    trajectories' reference log-probs when `trajectories` asks for them."""
    pairs = batch.pairs
    chosen_mask, rejected_mask = pair_masks(batch)
    if rides(pairs.chosen):  # rejected rides too: both are read here (`pair_riders`)
        def both(x):
            seqs, chosen, rejected, masks = x
            out, c, r = model.shared(model.reference, seqs, (chosen, rejected))
            return out.logprobs, masked_sums(c.logprobs, masks[0]), masked_sums(r.logprobs,
                                                                              masks[1])

        ref, ref_chosen, ref_rejected = map_rows(
            both, (batch.sequences, pairs.chosen, pairs.rejected, (chosen_mask, rejected_mask)),
            chunks)
        pairs = pairs.replace(ref_chosen=sg(ref_chosen), ref_rejected=sg(ref_rejected))
        return batch.replace(pairs=pairs, **({"ref_logprobs": sg(ref)} if trajectories else {}))

    def sums(seqs_and_mask):
        seqs, mask = seqs_and_mask
        return masked_sums(model.outputs(model.reference, seqs).logprobs, mask)

    return batch.replace(pairs=pairs.replace(
        ref_chosen=sg(map_rows(sums, (pairs.chosen, chosen_mask), chunks)),
        ref_rejected=sg(map_rows(sums, (pairs.rejected, rejected_mask), chunks))))


def _advantages(prepared: Prepared, cfg: LearnerConfig) -> tuple[Prepared, dict]:
    """Runs the advantage estimator on the batch's token rewards (or on `rewards`, one per row,
    laid out on each row's last trained token: `outcome_rewards`)."""
    batch, mask = prepared.batch, prepared.mask
    valid = row_mask(batch.sequences)
    policy = cfg.term("policy_gradient").config
    spec = losses.get(cfg.advantage, kind="advantage")
    returns = None
    metrics = {}
    if batch.advantages is not None:
        advantages, weights = batch.advantages * valid, valid
    else:
        token_rewards, reward_mask = (
            (batch.token_rewards, batch.reward_mask) if batch.token_rewards is not None
            else outcome_rewards(batch.rewards, mask))
        kl = None
        if policy.kl_in_reward and policy.kl_coef > 0:
            # InstructGPT-style: the behaviour policy's per-token KL to the reference, a penalty.
            kl = losses.kl_estimate(batch.old_logprobs, batch.ref_logprobs,
                                    policy.kl_estimator) * mask
        if spec.config_cls.needs_values:
            token_rewards = credit_to_trained(token_rewards, mask)
            if kl is not None:
                token_rewards = token_rewards - policy.kl_coef * kl
            advantages, returns = spec.fn(token_rewards, batch.old_values, mask,
                                          cfg.advantage_config)
            weights = valid
        else:
            if kl is not None:
                # The critic-free estimators take the row's summed KL as a penalty on its last
                # reward (an outcome-level penalty; with one reward per row: r - kl_coef sum KL).
                last = last_position(reward_mask)
                token_rewards = token_rewards - policy.kl_coef * jnp.where(
                    last > 0, jnp.sum(kl, -1)[:, None], 0.0)
                reward_mask = jnp.maximum(reward_mask, last)
            inputs = estimator_inputs(cfg.advantage_config, batch.step_keys, batch.turn_starts)
            advantages, weights = spec.fn(token_rewards, reward_mask, batch.group_ids, valid,
                                          cfg.advantage_config, **inputs)
    n = jnp.maximum(jnp.sum(valid), 1.0)
    if batch.rewards is not None:
        metrics["reward"] = jnp.sum(batch.rewards * valid) / n
    metrics["rows_kept"] = jnp.sum(weights) / n
    seq_adv = advantages if advantages.ndim == 1 else jnp.sum(advantages * mask, -1) / jnp.maximum(
        jnp.sum(mask, -1), 1.0)
    metrics["advantage_abs"] = jnp.sum(jnp.abs(seq_adv) * weights) / jnp.maximum(jnp.sum(weights), 1)
    return prepared.replace(mask=mask * weights[:, None], advantages=advantages,
                            returns=returns), metrics


# ---- loss terms on one micro-batch -------------------------------------------------------------

def _policy_gradient(cfg, out: Outputs, pairs, micro: Prepared, t: Totals):
    batch = micro.batch
    tis = cfg.tis_cap is not None
    old = batch.old_logprobs
    if tis:
        old = sg(out.logprobs) if micro.proximal is None else micro.proximal
    return losses.policy_gradient.policy_gradient_loss(
        out.logprobs, old, micro.advantages, micro.mask,
        cfg, ref_logprobs=batch.ref_logprobs, entropy=out.entropy,
        sampler_logprobs=batch.old_logprobs if tis else None, denominators=t.tokens)


def _value(cfg, out: Outputs, pairs, micro: Prepared, t: Totals):
    return losses.value.value_loss(out.values, micro.batch.old_values, micro.returns, micro.mask,
                                   cfg, denominators=t.tokens)


def _sft(cfg, out: Outputs, pairs, micro: Prepared, t: Totals):
    return losses.sft.sft_loss(out.logprobs, out.mean_logprobs, micro.mask, cfg,
                               denominators=t.tokens)


def _dpo(cfg, out, pairs, micro: Prepared, t: Totals):
    (chosen, chosen_mask), (rejected, rejected_mask) = pairs
    p = micro.batch.pairs
    return losses.dpo.dpo_loss(masked_sums(chosen.logprobs, chosen_mask),
                               masked_sums(rejected.logprobs, rejected_mask), p.ref_chosen,
                               p.ref_rejected, p.weights, cfg, total_weight=t.pair_weight)


def _counterfactual(cfg, out, pairs, micro: Prepared, t: Totals):
    (anchor, anchor_mask), failed = pairs
    p = micro.batch.pairs
    failed_sums = None if failed is None else masked_sums(failed[0].logprobs, failed[1])
    return losses.counterfactual.counterfactual_loss(
        anchor.logprobs, anchor_mask, p.weights, cfg, failed_logprob_sums=failed_sums,
        ref_anchor=p.ref_chosen, ref_failed=p.ref_rejected, denominators=t.pair_tokens,
        total_weight=t.pair_weight)


def mismatch_metrics(behaviour: Array, learner: Array, mask: Array, t: Totals) -> dict:
    """The sampler/learner mismatch on the trained tokens, y ~ behaviour: `mismatch_kl`, the
    mean of behaviour_logp - learner_logp (k1), and `mismatch_k3`, the mean of
    exp(r) - 1 - r with r = learner_logp - behaviour_logp (k3, >= 0); both estimate
    KL(behaviour || learner) (Schulman 2020, `losses.kl`). Read before any update (the first
    mini-batch's, `train_step`), they measure how far the sampler's numbers are from the
    learner's; `seetjax.rl.alarms` alarms on the k3."""
    on = mask > 0  # padding's log-probs may be anything: exp(r) must not overflow there
    return {name: masked_mean(jnp.where(on, losses.kl_estimate(behaviour, learner, k), 0.0),
                              mask, t.tokens)
            for name, k in (("mismatch_kl", "k1"), ("mismatch_k3", "k3"))}


_TERMS = {"policy_gradient": _policy_gradient, "value": _value, "sft": _sft, "dpo": _dpo,
          "counterfactual": _counterfactual}
_SEQUENCE_TERMS = ("policy_gradient", "value", "sft")


def micro_objective(trainable: nnx.State, model: StepModel, micro: Prepared,
                    t: Totals) -> tuple[Array, dict]:
    """Weighted sum of the configured loss terms on one micro-batch, and their metrics."""
    cfg = model.config
    states = (trainable, model.frozen)
    rows = _trained_rows(cfg)
    out = pairs = None
    metrics: dict[str, Array] = {}
    seq_pairs = micro.batch.pairs
    riders = ()
    if seq_pairs is not None and rides(seq_pairs.chosen):
        riders = (seq_pairs.chosen,) + ((seq_pairs.rejected,) if rows["rejected"] else ())
    if rows["sequences"]:
        policy = cfg.term("policy_gradient") is not None
        out, *carried = model.shared(states, micro.batch.sequences, riders, entropy=policy,
                                     values=cfg.term("value") is not None)
        if policy:
            metrics["entropy"] = masked_mean(sg(out.entropy), micro.mask, t.tokens)
            metrics.update(mismatch_metrics(micro.batch.old_logprobs, sg(out.logprobs),
                                            micro.mask, t))
    if rows["chosen"]:
        chosen_mask, rejected_mask = pair_masks(micro.batch)
        if riders:
            chosen = (carried[0], chosen_mask)
            rejected = (carried[1], rejected_mask) if rows["rejected"] else None
        else:
            chosen = (model.outputs(states, seq_pairs.chosen), chosen_mask)
            rejected = ((model.outputs(states, seq_pairs.rejected), rejected_mask)
                        if rows["rejected"] else None)
        pairs = (chosen, rejected)
    total = jnp.zeros((), jnp.float32)
    for term in cfg.losses:
        loss, term_metrics = _TERMS[term.name](term.config, out, pairs, micro, t)
        total = total + term.weight * loss
        metrics[f"loss/{term.name}"] = loss
        metrics.update(term_metrics)
    metrics["loss"] = total
    return total, metrics
