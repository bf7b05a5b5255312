"""The environment registry and a run config's `env` section."""

import ml_collections
import pytest

from seetjax.envs import registry
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.envs.bfcl.splits import load_split
from seetjax.envs.capabilities import GroundTruth, Hints, ReadsCalls, Rewindable
from seetjax.rl.config import default_config, env_of


def test_bfcl_is_the_default_environment():
    spec = registry.spec(registry.DEFAULT)
    assert (spec.name, spec.config) == ("bfcl", BfclEnvConfig)
    assert registry.spec_of(BfclEnvConfig(prompt_style="native")) is spec
    env = registry.make_env(BfclEnvConfig(max_steps_per_turn=3))
    assert isinstance(env, BfclEnv) and env.config.max_steps_per_turn == 3


def test_bfcl_has_every_seet_capability():
    env = registry.make_env(BfclEnvConfig())
    assert all(isinstance(env, c) for c in (ReadsCalls, Rewindable, Hints, GroundTruth))


def test_unknown_names_sections_and_duplicates_fail():
    with pytest.raises(ValueError, match="env.name='nope': one of .*'bfcl'"):
        registry.spec("nope")
    with pytest.raises(TypeError, match="spec_of.config={}: no registered environment's section"):
        registry.make_env({})
    with pytest.raises(ValueError, match="EnvSpec.name='bfcl': already registered"):
        registry.register(registry.spec("bfcl"))


def test_bfcl_task_loader_reads_the_data_section():
    data = default_config().data.to_dict()
    data["categories"] = "base, miss_param"
    tasks = registry.spec("bfcl").load_tasks(BfclEnvConfig(), data, "validation", 2)
    assert [t.id for t in tasks] == [t.id for t in load_split("validation", ("base", "miss_param"),
                                                               2)]


def test_the_env_section_is_validated_with_its_field_named():
    config = default_config()
    assert config.env.name == "bfcl"
    assert env_of(config) == BfclEnvConfig(prompt_style="compact", compact_description_chars=80)
    del config.env.name  # the default environment
    assert isinstance(env_of(config), BfclEnvConfig)

    config.env.name = "nope"
    with pytest.raises(ValueError, match=r"config.env.name: env.name='nope': one of"):
        env_of(config)
    config.env.name = "bfcl"
    config.env.corpus = "x.jsonl"
    with pytest.raises(ValueError, match=r"config.env.corpus=.*: unknown field\(s\) \['corpus'\]"):
        env_of(config)
    bare = ml_collections.ConfigDict(dict(seed=0))
    with pytest.raises(ValueError, match="config.env=None: missing"):
        env_of(bare)
