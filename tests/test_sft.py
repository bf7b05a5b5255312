"""The SFT run's config checks: a bad setting fails, naming it, before anything is loaded."""

import pytest

from configs.sft import get_config
from seetjax.sft import stage_groups, validate


@pytest.mark.parametrize("field, value, message", [
    ("data.source", "csv", "config.data.source='csv'"),
    ("data.max_len", 4096, "max_len=4096 > seq_len=2048"),
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
