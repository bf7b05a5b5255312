"""Pure loss functions `f(logprobs, batch fields, config) -> (loss, metrics)`, registered by name.

Losses: "sft", "policy_gradient" (PPO/GRPO/DAPO/GSPO/REINFORCE/RLOO surrogate, KL, entropy),
"value" (PPO), "dpo", "counterfactual" (SEET slow loop). Advantage estimators (kind "advantage"):
"grpo", "rloo", "reinforce", "gae", "gigpo". Importing this package registers them all.

Imports nothing of seetjax: losses read arrays.
"""

from seetjax.losses import advantages, counterfactual, dpo, gigpo, policy_gradient, sft, value
from seetjax.losses.aggregation import AGGREGATIONS, Denominators, aggregate, masked_mean
from seetjax.losses.kl import KL_ESTIMATORS, kl_estimate
from seetjax.losses.logprobs import TokenStats, chunked_token_stats, sequence_token_stats, token_stats
from seetjax.losses.registry import get, make_config, names, register

__all__ = ["AGGREGATIONS", "KL_ESTIMATORS", "Denominators", "TokenStats", "advantages",
           "aggregate", "chunked_token_stats", "counterfactual", "dpo", "get", "gigpo", "kl_estimate",
           "make_config", "masked_mean", "names", "policy_gradient", "register",
           "sequence_token_stats", "sft", "token_stats", "value"]
