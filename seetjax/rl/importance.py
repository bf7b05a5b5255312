"""What the policy-gradient loss's importance ratios ask of a run's config: rollouts sampled
from the distribution the learner scores, in the context it scores them in; and with
asynchronous rollouts, a weight for tokens older than the weights being updated."""

from __future__ import annotations

import dataclasses
import math

from seetjax.errors import invalid
from seetjax.learner.config import LearnerConfig
from seetjax.rl.schedule import ScheduleConfig
from seetjax.sampling import SamplingParams
from seetjax.seet.config import StageConfig


def check_importance_ratios(algorithm: str, sampling: SamplingParams,
                            stages: tuple[StageConfig, ...]) -> None:
    """The policy-gradient loss (every RL algorithm but DPO) divides the learner's log-prob of
    each trained token by the sampler's (`old_logprobs`; PPO's KL penalty reads them too). The
    learner scores a token in its training row under softmax(logits / temperature), so the
    sampler must have drawn it from that same distribution, in that same context."""
    for name, on in (("top_k", sampling.top_k > 0), ("top_p", sampling.top_p < 1.0)):
        if on:
            raise invalid(
                "config.sampling", name, getattr(sampling, name), "with learner.algorithm="
                f"{algorithm!r}: rollouts for a policy-gradient loss must sample from the full "
                "softmax(logits / temperature); the sampler's log-probs are taken before "
                "top-k/top-p truncation, as the learner recomputes them, so the importance ratio "
                "would not be that of the distribution actually sampled from. Use top_k=0 and "
                "top_p=1.0 for training (evaluation and launch/sample.py may still use them)")
    for stage in stages:
        if stage.training_context == "drop":
            raise invalid(
                f"config.seet.stage{stage.stage}", "training_context", "drop",
                f"with learner.algorithm={algorithm!r}: a dropped attempt stays in the sampler's context "
                "but not in the training row, so the sampler's log-probs of every later reply (the "
                "importance ratio's denominator) are conditioned on a context the learner never sees. Use "
                "'mask' (the attempt stays in the row without loss) or a loss without importance ratios "
                "(learner.algorithm='dpo')")


def with_stale_token_weights(learner: LearnerConfig, schedule: ScheduleConfig) -> LearnerConfig:
    """`learner` as an asynchronous run trains it: the tokens are older than the weights it
    updates, so each token's clipped loss is weighted by pi_proximal / pi_behaviour (the
    learner's log-prob under the pre-update weights over the one the token recorded), capped by
    `learner.loss.tis_cap`, which defaults there to inf: AReaL's decoupled objective
    (arXiv:2505.24298, section 5.2); a finite cap is truncated importance sampling."""
    policy = learner.term("policy_gradient")
    if schedule.schedule != "async" or policy is None or policy.config.tis_cap is not None:
        return learner
    decoupled = dataclasses.replace(policy, config=dataclasses.replace(policy.config,
                                                                       tis_cap=math.inf))
    return dataclasses.replace(learner, losses=tuple(decoupled if t is policy else t
                                                     for t in learner.losses))
