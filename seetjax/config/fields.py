"""Config errors that name their field: what run configs, SFT configs and environments' own
checks (`seetjax.envs.registry.EnvSpec.check_data`) share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def checked_field(path: str, make: Callable[[], T]) -> T:
    """`make()`, with a ValueError/TypeError re-raised as `config.<path>: ...`."""
    try:
        return make()
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"config.{path}: {e}") from None


def as_dataclass(cls: type[T], values: Mapping[str, Any], path: str, **extra: Any) -> T:
    """`cls(**values, **extra)`, naming the section when a field is unknown or invalid."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"config.{path}: unknown field(s) {unknown}; known: {sorted(names)}")
    return checked_field(path, lambda: cls(**dict(values), **extra))
