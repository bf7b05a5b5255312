"""The run's alarms (seetjax.rl.alarms): the weight checksum (exact over shardings, sensitive to
any changed bit, like with like after the sampler's cast), a broken weight sync seen, zero parsed
tool calls on scripted BFCL rollouts, the mismatch threshold, fail_on_alarm, the report's line,
and the config's errors."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from seetjax.envs.bfcl.data import load_tasks
from seetjax.envs.bfcl.env import BfclEnvConfig
from seetjax.learner import create_learner, learner_config
from seetjax.models.hf import load_hf_checkpoint
from seetjax.rl.alarms import (
    AlarmConfig,
    AlarmRaised,
    Alarms,
    alarm_lines,
    call_counts,
    learner_checksum,
    params_checksum,
    weight_sync,
)
from seetjax.rl.config import build_plan, default_config
from seetjax.rl.policy_states import PolicyStates
from seetjax.rollout.loop import Rollout, RolloutConfig
from seetjax.rollout.policy import SamplerPolicy
from seetjax.runtime.sharding import make_mesh
from seetjax.sampling import Sampler, SamplingParams
from seetjax.seet.config import PLAIN_STAGE
from seetjax.serving.engine import Engine
from seetjax.serving.rollout_policy import EnginePolicy
from tests.rollout.scripted import ScriptedPolicy


def _learner(embedded_dir, dtype: str, lora: bool = False):
    model = load_hf_checkpoint(embedded_dir, dtype=dtype)
    spec = {"algorithm": "grpo", **({"lora": {"rank": 2}} if lora else {})}
    return create_learner(model, learner_config(spec), mesh=make_mesh(1, 1, 1, jax.devices()[:1]))


def _policy(learner, state, params) -> SamplerPolicy:
    sampler = Sampler(learner.model(state), pad_id=0)
    return SamplerPolicy(sampler, params, SamplingParams(), [0], jax.random.key(0))


def test_checksum_is_exact_over_shardings_and_sees_any_changed_bit():
    x = jax.random.normal(jax.random.key(0), (8, 24), jnp.float32)
    tree = {"a": x, "b": {"c": jnp.arange(5, dtype=jnp.int32)}}
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    sharded = {"a": jax.device_put(x, NamedSharding(mesh, P("x", "y"))), "b": tree["b"]}
    base = params_checksum(tree)
    assert params_checksum(sharded) == base  # integer sums: the reduction order cannot matter
    flipped = x.at[3, 7].set(jnp.nextafter(x[3, 7], jnp.inf))  # one ulp, one element
    swapped = x.at[0, 0].set(x[0, 1]).at[0, 1].set(x[0, 0])
    renamed = {"z": x, "b": tree["b"]}
    for other in ({**tree, "a": flipped}, {**tree, "a": swapped}, renamed):
        assert params_checksum(other) != base


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_learner_checksum_is_the_sampler_copys_and_needs_its_cast(embedded_dir, dtype):
    learner, state = _learner(embedded_dir, dtype)
    sampling = learner.sampling_params(state)
    assert learner_checksum(learner, state) == params_checksum(sampling)
    uncast = params_checksum(state.params) + params_checksum(state.frozen)
    assert (uncast % 2**32 == params_checksum(sampling)) == (dtype == "float32")


def test_a_stale_lora_adapter_in_the_sampler_raises_the_alarm(embedded_dir, caplog):
    """The sampler keeps the adapters it was given before the learner's update: the sync check
    says so, and the step's check fires `weight_sync` with a warning."""
    learner, state = _learner(embedded_dir, "bfloat16", lora=True)
    stale = learner.sampling_params(state)
    moved = state.replace(params=jax.tree.map(lambda a: a + 0.01, state.params))  # an update
    policies = PolicyStates(learner, moved)
    fresh = policies.sampling_params("shared")
    assert weight_sync(policies, _policy(learner, moved, fresh)) == {"sync/weight_mismatch": 0.0}
    synced = weight_sync(policies, _policy(learner, moved, stale))
    assert synced == {"sync/weight_mismatch": 1.0}
    with caplog.at_level("WARNING"):
        fired = Alarms(AlarmConfig()).check(3, synced)
    assert fired == {"alarm/zero_tool_calls": 0.0, "alarm/weight_sync": 1.0,
                     "alarm/mismatch_kl": 0.0}
    assert "RL step 3: alarm weight_sync" in caplog.text


def test_the_engines_weights_are_the_ones_checked_in_engine_mode(embedded_dir, tokenizer):
    """rollout.mode "engine": the copy checked is the engine's, stale until `update_weights`."""
    learner, state = _learner(embedded_dir, "float32")
    stale = jax.tree.map(jnp.copy, learner.sampling_params(state))
    moved = state.replace(params=jax.tree.map(lambda a: a + 0.01, state.params))  # an update
    policies = PolicyStates(learner, moved)
    with Engine(learner.model(moved), tokenizer, params=stale) as engine:
        policy = EnginePolicy(engine, SamplingParams(), seed=0)
        assert weight_sync(policies, policy) == {"sync/weight_mismatch": 1.0}
        engine.update_weights(policies.sampling_params("shared"), version=1)
        assert weight_sync(policies, policy) == {"sync/weight_mismatch": 0.0}


def _scripted_step(tokenizer, reply: str) -> dict[str, float]:
    rollout = Rollout(tokenizer, RolloutConfig(group_size=2, env=BfclEnvConfig(
        prompt_style="compact")))
    result = rollout(load_tasks("base")[:1], ScriptedPolicy(tokenizer, lambda row: reply),
                     PLAIN_STAGE, progress=0.0, step=0, seed=0)
    return {f"rollout/{k}": v for k, v in call_counts(result).items()}


def test_a_step_without_parsed_calls_raises_the_alarm(tokenizer):
    silent = _scripted_step(tokenizer, "I would rather not.")
    calling = _scripted_step(tokenizer, "[cd(folder='document')]")
    assert silent["rollout/parsed_calls"] == 0 and silent["rollout/call_turns"] > 0
    assert calling["rollout/parsed_calls"] > 0
    alarms = Alarms(AlarmConfig())
    assert alarms.check(1, silent)["alarm/zero_tool_calls"] == 1.0
    assert alarms.check(2, calling)["alarm/zero_tool_calls"] == 0.0
    # turns that expect no calls (none checked) never make silence an alarm
    quiet = {**silent, "rollout/call_turns": 0.0}
    assert alarms.check(3, quiet)["alarm/zero_tool_calls"] == 0.0


def test_the_mismatch_alarm_reads_every_roles_k3_against_the_threshold():
    alarms = Alarms(AlarmConfig(max_mismatch_kl=0.05))
    under = {"learner/mismatch_k3": 0.049, "learner/mismatch_kl": 0.9}  # k1 is not the test
    assert alarms.check(1, under)["alarm/mismatch_kl"] == 0.0
    over = {"learner/coordinator_mismatch_k3": 0.01, "learner/worker_mismatch_k3": 0.06}
    assert alarms.check(2, over)["alarm/mismatch_kl"] == 1.0
    assert alarms.check(3, {"learner/mismatch_k3": float("nan")})["alarm/mismatch_kl"] == 1.0
    assert alarms.check(4, {"learner/no_signal": 1.0})["alarm/mismatch_kl"] == 0.0


def test_fail_on_alarm_stops_only_a_step_that_alarmed():
    alarms = Alarms(AlarmConfig(fail_on_alarm=True))
    alarms.check(1, {"sync/weight_mismatch": 0.0})
    alarms.enforce(1)
    alarms.check(2, {"sync/weight_mismatch": 0.5})
    with pytest.raises(AlarmRaised, match="RL step 2: alarm.s. weight_sync"):
        alarms.enforce(2)
    lenient = Alarms(AlarmConfig())
    lenient.check(2, {"sync/weight_mismatch": 0.5})
    lenient.enforce(2)


def test_report_line_names_the_steps_that_alarmed():
    rows = [{"step": 0}, {"step": 1, "alarm/weight_sync": 0.0, "alarm/zero_tool_calls": 1.0},
            {"step": 2, "alarm/weight_sync": 1.0, "alarm/zero_tool_calls": 1.0}]
    assert alarm_lines(rows)[-1] == ("Alarms: zero_tool_calls at step(s) 1, 2; weight_sync at "
                                     "step(s) 2.")
    quiet = [{"step": 1, "alarm/weight_sync": 0.0}, {"step": 2, "alarm/weight_sync": 0.0}]
    assert alarm_lines(quiet)[-1] == "Alarms: none fired in 2 checked RL steps."


@pytest.mark.parametrize("field,value,message", [
    ("max_mismatch_kl", 0.0, "AlarmConfig.max_mismatch_kl=0.0: must be a number > 0"),
    ("max_mismatch_kl", -1.0, "AlarmConfig.max_mismatch_kl=-1.0: must be a number > 0"),
    ("fail_on_alarm", 1, "AlarmConfig.fail_on_alarm=1: must be a bool"),
])
def test_bad_alarm_fields_are_refused_by_name(field, value, message):
    config = default_config()  # a whole section: ConfigDict would refuse a wrong type itself
    config.alarms = ml_collections.ConfigDict({**config.alarms.to_dict(), field: value})
    with pytest.raises(ValueError, match=f"config.alarms: {message}"):
        build_plan(config)


def test_the_plan_carries_the_alarms_and_unknown_fields_fail():
    config = default_config()
    config.alarms.max_mismatch_kl = 0.2
    assert build_plan(config).alarms == AlarmConfig(max_mismatch_kl=0.2)
    config.alarms.max_kl = 1.0
    with pytest.raises(ValueError, match=r"config\.alarms\.max_kl=1\.0: unknown field\(s\) \['max_kl'\]"):
        build_plan(config)
