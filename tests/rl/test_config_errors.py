"""Every check of a config section reachable from the run config names its class, field and value
(`Class.field=value: requirement`, seetjax/errors.py): each dataclass of a validated plan (and of
every registered environment's section, the model's and LoRA's), each field set to bad values of
its own type, one at a time; the first one refused must be refused in that shape."""

import dataclasses
import math
import re
from pathlib import Path

import pytest

from seetjax.config.sections import load_config_file
from seetjax.envs import registry
from seetjax.models.config import ModelConfig
from seetjax.models.lora import LoRAConfig
from seetjax.rl.config import build_plan
from seetjax.rollout.multi_agent import MultiAgentConfig

ROOT = Path(__file__).resolve().parents[2]
SHAPE = re.compile(r"^(\w+)\.(\w+)\S*=")


def bad_values(value):
    """Values of `value`'s type that some check may refuse (a bool before an int: bool is one)."""
    if isinstance(value, bool):
        return [2, "yes"]
    if isinstance(value, int):
        return [-1, 0, 10**9, -(10**9)]
    if isinstance(value, float):
        return [-1.5, 1.5, math.nan, -math.inf, 1e9]
    if isinstance(value, str):
        return ["bogus", ""]
    if isinstance(value, tuple) and not any(dataclasses.is_dataclass(v) for v in value):
        return [("bogus",), ()]
    return []


def sections(value, seen):
    """Every dataclass instance in `value` (its fields and tuples walked), once per class."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value) in seen:
            return
        seen.add(type(value))
        yield value
        for f in dataclasses.fields(value):
            yield from sections(getattr(value, f.name), seen)
    elif isinstance(value, tuple | list):
        for v in value:
            yield from sections(v, seen)


@pytest.fixture(scope="module")
def roots():
    plan = build_plan(load_config_file(ROOT / "configs" / "tiny.py"))
    envs = [registry.spec(name).config() for name in registry.names()]
    model = ModelConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1,
                        num_heads=2, num_kv_heads=1)
    return [plan, *envs, model, LoRAConfig(rank=4), MultiAgentConfig()]


def test_every_checked_field_is_named_with_its_class_and_value(roots):
    checked, wrong = {}, []
    for section in sections(roots, set()):
        owners = {c.__name__ for c in type(section).__mro__}
        for f in dataclasses.fields(section):
            if not f.init:
                continue
            for bad in bad_values(getattr(section, f.name)):
                try:
                    dataclasses.replace(section, **{f.name: bad})
                except Exception as e:  # noqa: BLE001 (any other kind is wrong too)
                    match = isinstance(e, ValueError | TypeError) and SHAPE.match(str(e))
                    # a section's checks may build a helper with the same fields (QASearchConfig's
                    # WorldConfig): its owner is that helper, and the field is still named
                    if not match or not (match[1] in owners or match[2] == f.name):
                        wrong.append(f"{type(section).__name__}.{f.name}={bad!r}: {e!r}")
                    checked[(type(section).__name__, f.name)] = str(e)
                    break
    assert not wrong, "\n".join(wrong)
    classes = {c for c, _ in checked}
    # the sections whose checks exist (a regression here: a check lost or a section unreached)
    assert {"LearnerConfig", "OptimizerConfig", "LossTerm", "EpisodeLimits", "RolloutConfig",
            "SamplingParams", "RewardConfig", "AgentRewardConfig", "ShapingConfig", "Transition",
            "BfclEnvConfig", "QASearchRunConfig", "ModelConfig", "LoRAConfig",
            "MultiAgentConfig"} <= classes, sorted(classes)
    assert len(checked) >= 80, len(checked)
