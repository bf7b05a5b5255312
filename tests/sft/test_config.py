"""The SFT run's config checks: a bad setting fails, naming it, before anything is loaded."""

import math

import pytest

from configs.sft import get_config
from seetjax.sft.config import stage_groups, validate
from seetjax.sft.run import load_single_turn
from tests.launch.flagcheck import assert_flag_errors


@pytest.mark.parametrize("field, value, message", [
    ("data.source", "csv", "config.data.source='csv'"),
    ("data.max_len", 4096, "max_len=4096: must be <= seq_len=2048"),
    ("data.max_observation_tokens", -1, "config.data.max_observation_tokens=-1"),
    ("data.final_reply_weight", 0.0, "config.data.final_reply_weight=0.0"),
    ("data.categories", " ", "no dialogs named"),
    ("data.batch_size", 0, "batch_size=0"),
    ("coreset.strategy", "best", "strategy='best'"),
    ("coreset.strategy", "random", "exactly one of size"),
    ("replay.capacity", -1, "capacity=-1"),
    ("replay.ratio", 1.0, "config.replay.ratio=1.0"),
    ("learner.algorithm", "magic", "learner.algorithm='magic'"),
    ("train.steps", 0, "config.train.steps=0"),
])
def test_bad_settings_fail_naming_them(field, value, message):
    config = get_config()
    section, name = field.split(".")
    config[section][name] = value
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        validate(config)


def test_default_config_is_valid_and_stages_split():
    config = get_config()
    validate(config)
    assert stage_groups(config.data) == ["base,miss_func,miss_param,long_context"]
    config.data.stages = "base; miss_param;"
    assert stage_groups(config.data) == ["base", "miss_param"]


@pytest.mark.parametrize("name, value, message", [
    ("selection", -2, "config.data.single_turn: single_turn.selection=-2"),
    ("categories", "simple,live_relevance", "config.data.single_turn: single_turn.categories="),
    ("retrieval_k", 0, "config.data.single_turn: single_turn.retrieval_k=0"),
])
def test_bad_single_turn_settings_fail_naming_the_section(name, value, message):
    config = get_config()
    config.data.single_turn.retrieval = 10
    config.data.single_turn[name] = value
    with pytest.raises(ValueError, match=message):
        validate(config)


def test_single_turn_dialogs_are_made_only_when_asked():
    config = get_config()
    assert load_single_turn(config) == ([], None)
    config.data.single_turn.selection, config.data.single_turn.retrieval = 3, 2
    dialogs, report = load_single_turn(config)
    assert [d.task_type for d in dialogs] == ["tool_selection"] * 3 + ["tool_retrieval"] * 2
    assert all(d.metadata["prompt_style"] == config.data.prompt_style for d in dialogs)
    assert (report.selection, report.retrieval) == (3, 2)


@pytest.mark.parametrize("path, value", [
    ("learner.optimizer.learning_rate", math.nan), ("learner.optimizer.learning_rate", math.inf),
    ("learner.optimizer.weight_decay", -math.inf), ("learner.lora.alpha", math.nan),
    ("coreset.fraction", math.nan), ("data.task_weights.base", math.inf)])
def test_non_finite_numbers_are_refused_naming_the_field(path, value):
    config = get_config()
    *sections, key = path.split(".")
    section = config
    for name in sections:
        section = section[name]
    section[key] = value
    with pytest.raises(ValueError, match=f"config.{path}={value!r}: must be a finite number"):
        validate(config)


def test_an_empty_workdir_is_refused():
    assert_flag_errors("launch/sft.py", [(["--workdir="], "--workdir names no directory"),
                                         (["--workdir=runs/sft"], "")])
