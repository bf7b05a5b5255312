"""seetjax/errors.py: every bad-input message reads `Owner.field=value: requirement`."""

import dataclasses

import pytest

from seetjax.errors import MAX_VALUE_CHARS, invalid, require, require_int


@dataclasses.dataclass
class Limits:
    max_steps: int = 3


def test_the_owner_is_a_class_an_instance_or_a_name():
    for owner in (Limits, Limits(), "Limits"):
        error = invalid(owner, "max_steps", 0, "must be >= 1")
        assert type(error) is ValueError
        assert str(error) == "Limits.max_steps=0: must be >= 1"
    assert str(invalid("config.rl.sampling", "top_p", 1.5, "must be in (0, 1]")) == (
        "config.rl.sampling.top_p=1.5: must be in (0, 1]")


def test_the_value_is_its_repr():
    assert str(invalid(Limits, "name", "x", "one of ('a',)")) == "Limits.name='x': one of ('a',)"
    assert str(invalid(Limits, "held", (("a", 1),), "r")) == "Limits.held=(('a', 1),): r"


def test_a_long_value_is_shortened_to_its_start():
    text = "word " * 100
    message = str(invalid(Limits, "prompt", text, "too long"))
    shown = message.removeprefix("Limits.prompt=").removesuffix(": too long")
    assert len(shown) == MAX_VALUE_CHARS and shown.endswith("...")
    assert shown[:-3] == repr(text)[:MAX_VALUE_CHARS - 3]
    exact = "a" * (MAX_VALUE_CHARS - 2)  # its repr has exactly MAX_VALUE_CHARS characters
    assert repr(exact) in str(invalid(Limits, "f", exact, "r"))


def test_the_kind_is_kept():
    assert type(invalid(Limits, "f", 1, "r", TypeError)) is TypeError


def test_require_raises_only_when_the_check_fails():
    require(True, Limits, "max_steps", 0, "must be >= 1")
    with pytest.raises(ValueError, match=r"^Limits\.max_steps=0: must be >= 1$"):
        require(False, Limits, "max_steps", 0, "must be >= 1")
    with pytest.raises(TypeError, match=r"^Limits\.max_steps='3': must be an int$"):
        require(False, Limits(), "max_steps", "3", "must be an int", TypeError)


@pytest.mark.parametrize("value", [0, -1, 1.0, True, "2", None])
def test_require_int_refuses_what_is_not_an_integer_at_least_the_bound(value):
    with pytest.raises(ValueError, match=rf"^Limits\.max_steps={value!r}: must be an integer >= 1$"):
        require_int(Limits, "max_steps", value, 1)


def test_require_int_takes_an_integer_at_the_bound_or_above():
    for value in (1, 7):
        require_int(Limits, "max_steps", value, 1)
