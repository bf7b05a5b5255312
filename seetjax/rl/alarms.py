"""Alarms that make a run's silent rollout failures loud (docs/learner.md, "Alarms").

Each RL step is checked for three failures that train on garbage without an error:

- `zero_tool_calls`: the step's replies made no parsed tool call while its turns expect calls
  (a broken call format, a chat template that lost the tools, a collapsed policy);
- `weight_sync`: the parameters the sampler (or, with rollout.mode "engine", the engine) holds
  after the step's sync differ from the learner's, cast as the sampler's are (a LoRA adapter
  that never reached the sampler, a stale copy: verl #7495, NeMo-RL #4018). Both sides are
  reduced on device to one 32-bit checksum (`params_checksum`), exact whatever the reduction
  order, so sharded copies compare equal;
- `mismatch_kl`: the k3 estimate of KL(behaviour || learner) on the trained tokens
  (`learner/mismatch_k3`, Schulman 2020, from the learner's update) is above
  `AlarmConfig.max_mismatch_kl`.

An alarm is a run metric (`alarm/<name>` 0 or 1, in metrics.jsonl and TensorBoard), an absl
warning, and a line of report.md (`alarm_lines`); with `fail_on_alarm` the run stops after the
step's metrics are written (`AlarmRaised`).
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from seetjax.errors import invalid
from seetjax.learner import Learner, TrainState
from seetjax.learner.state import cast_like
from seetjax.rl.policy_states import SHARED, PolicyStates
from seetjax.rollout.result import RolloutResult
from seetjax.runtime.sync import mean_over_processes
from seetjax.serving.rollout_policy import EnginePolicy

ALARMS = ("zero_tool_calls", "weight_sync", "mismatch_kl")
MISMATCH_SUFFIX = "mismatch_k3"  # learner metric the mismatch alarm reads (any role's)


class AlarmRaised(RuntimeError):
    """A step raised an alarm under `AlarmConfig.fail_on_alarm`."""


@dataclasses.dataclass(frozen=True)
class AlarmConfig:
    """max_mismatch_kl: the k3 mismatch KL per trained token above which a step alarms;
    fail_on_alarm: stop the run at the first step that alarms (after writing its metrics)."""

    max_mismatch_kl: float = 0.01
    fail_on_alarm: bool = False

    def __post_init__(self):
        value = self.max_mismatch_kl
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise invalid(self, "max_mismatch_kl", value, "must be a number > 0")
        if not isinstance(self.fail_on_alarm, bool):
            raise invalid(self, "fail_on_alarm", self.fail_on_alarm, "must be a bool")


# ---- the weight checksum ------------------------------------------------------------------------

_GOLDEN = np.uint32(0x9E3779B1)  # odd: position -> weight is a bijection mod 2^32


def _bits(x: jax.Array) -> jax.Array:
    """The leaf's bit patterns as uint32 (floats bitcast, so -0.0 != 0.0 and NaNs count)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{x.dtype.itemsize * 8}"))
    return x.astype(jnp.uint32)


def _leaf_fold(x: jax.Array, salt: int) -> jax.Array:
    """sum_i bits_i * (i * GOLDEN + salt | 1) mod 2^32 over the flat positions i: any one bit
    flipped, any two distinct values swapped, changes it; integer sums do not depend on the
    order of reduction. Positions come from iotas, not a reshape, so sharded leaves stay put."""
    index = jnp.zeros(x.shape, jnp.uint32)
    for axis in range(x.ndim):
        stride = np.uint32(int(np.prod(x.shape[axis + 1:], dtype=np.int64)) % 2**32)
        index = index + jax.lax.broadcasted_iota(jnp.uint32, x.shape, axis) * stride
    weights = (index * _GOLDEN + np.uint32(salt)) | np.uint32(1)
    return jnp.sum(_bits(x) * weights, dtype=jnp.uint32)


@functools.partial(jax.jit, static_argnames="dtype")
def _fold(tree: Any, dtype: str | None = None) -> jax.Array:
    if dtype is not None:
        tree = cast_like(tree, jnp.dtype(dtype))
    total = jnp.zeros((), jnp.uint32)
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        salt = zlib.crc32(jax.tree_util.keystr(path).encode())  # ties a leaf to its name
        total = total + _leaf_fold(leaf, salt)
    return total


def params_checksum(params: Any, dtype: str | None = None) -> int:
    """A 32-bit checksum of a parameter pytree (one jitted pass, one scalar to the host): the
    sum over leaves of `_leaf_fold`, salted by each leaf's path, after casting float leaves to
    `dtype` when given. Additive over disjoint leaves: the checksums of a split state sum (mod
    2^32) to that of the merged state."""
    return int(_fold(params, dtype))


def learner_checksum(learner: Learner, state: TrainState) -> int:
    """`params_checksum` of the parameters `state` gives the sampler: the f32 masters cast to
    the storage dtype, with the frozen part as it is (`Learner.sampling_params`), computed from
    the state itself without building that copy."""
    storage = jnp.dtype(learner.model_config.param_dtype).name
    return (params_checksum(state.params, storage) + params_checksum(state.frozen)) % 2**32


def _served(policy: Any) -> Any:
    """The parameters `policy` samples with: an `EnginePolicy`'s engine's, else its own."""
    return policy.engine.params if isinstance(policy, EnginePolicy) else policy.params


def weight_sync(policies: PolicyStates, policy: Any) -> dict[str, float]:
    """`sync/weight_mismatch`: the share of parameter sets (over roles and processes) whose
    sampler copy (`policy.params`, the engine's for an `EnginePolicy`, or each role's of a dict
    of policies) differs from the learner's `learner_checksum`."""
    by_role = policy if isinstance(policy, Mapping) else {SHARED: policy}
    differ = [params_checksum(_served(p)) != learner_checksum(policies.learner,
                                                              policies.state(role))
              for role, p in by_role.items()]
    return mean_over_processes({"sync/weight_mismatch": float(np.mean(differ))})


# ---- the rollout's tool calls ------------------------------------------------------------------

def call_counts(result: RolloutResult) -> dict[str, float]:
    """Per episode: parsed tool calls over every reply (attempts included) and turns that
    expect calls (checked turns); means, so they average over processes like the other
    rollout figures."""
    turns = [t for e in result.episodes for t in e.turns]
    n = max(len(result.episodes), 1)
    return {"parsed_calls": sum(len(r.calls) for t in turns for r in t.replies) / n,
            "call_turns": sum(t.checked for t in turns) / n}


# ---- the step's check --------------------------------------------------------------------------

class Alarms:
    """The checks of a run's steps; keeps which alarms fired (`fired`) for `enforce`."""

    def __init__(self, config: AlarmConfig):
        self.config = config
        self.fired: list[str] = []

    def check(self, step: int, metrics: Mapping[str, float]) -> dict[str, float]:
        """`alarm/<name>` (1.0 fired, 0.0 not) for step `step`'s metrics, each fired one
        warned about. Reads `rollout/parsed_calls`, `rollout/call_turns`,
        `sync/weight_mismatch` and every `learner/...mismatch_k3`; a check whose metrics the
        step lacks (no update, a loss without sampled log-probs) does not fire."""
        mismatch = {k: v for k, v in metrics.items()
                    if k.startswith("learner/") and k.endswith(MISMATCH_SUFFIX)}
        reasons = {
            "zero_tool_calls": (
                metrics.get("rollout/call_turns", 0.0) > 0
                and metrics.get("rollout/parsed_calls", 1.0) == 0,
                f"no parsed tool call in {metrics.get('rollout/call_turns', 0.0):.2f} turns per "
                "episode that expect calls"),
            "weight_sync": (
                metrics.get("sync/weight_mismatch", 0.0) > 0,
                f"the sampler's weights differ from the learner's in "
                f"{metrics.get('sync/weight_mismatch', 0.0):.0%} of the parameter sets"),
            "mismatch_kl": (
                any(not v <= self.config.max_mismatch_kl for v in mismatch.values()),
                "behaviour vs learner log-prob mismatch KL " + ", ".join(
                    f"{k}={v:.3g}" for k, v in mismatch.items())
                + f" above alarms.max_mismatch_kl={self.config.max_mismatch_kl}"),
        }
        self.fired = [name for name, (fired, _) in reasons.items() if fired]
        for name in self.fired:
            logging.warning("RL step %d: alarm %s: %s", step, name, reasons[name][1])
        return {f"alarm/{name}": float(name in self.fired) for name in ALARMS}

    def enforce(self, step: int) -> None:
        """Raises `AlarmRaised` if the last `check` fired and `fail_on_alarm` is set."""
        if self.fired and self.config.fail_on_alarm:
            raise AlarmRaised(f"RL step {step}: alarm(s) {', '.join(self.fired)} "
                              "(alarms.fail_on_alarm=True; see metrics.jsonl)")


def alarm_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """report.md's line on the alarms: the steps at which each fired, or that none did."""
    steps = {name: [int(r["step"]) for r in rows if r.get(f"alarm/{name}")] for name in ALARMS}
    checked = sum(1 for r in rows if any(f"alarm/{n}" in r for n in ALARMS))
    fired = [f"{name} at step(s) {', '.join(map(str, s))}" for name, s in steps.items() if s]
    text = (f"Alarms: {'; '.join(fired)}." if fired
            else f"Alarms: none fired in {checked} checked RL steps.")
    return ["", text]
