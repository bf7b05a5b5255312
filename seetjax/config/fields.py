"""Config errors that name their field: what run configs, SFT configs and environments' own
checks (`seetjax.envs.registry.EnvSpec.check_data`) share. Numbers are finite unless a field says
otherwise (`check_finite`): a NaN learning rate or an infinite temperature would train on
garbage, not fail."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from seetjax.errors import invalid

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
        raise invalid(f"config.{path}", unknown[0], values[unknown[0]],
                      f"unknown field(s) {unknown}; known: {sorted(names)}")
    return checked_field(path, lambda: cls(**dict(values), **extra))


def check_finite(values: Mapping[str, Any], path: str = "", infinite: Collection[str] = ()
                 ) -> None:
    """Raises `config.<path>.<key>=nan: must be a finite number` for the first NaN or infinity in
    `values` (nested mappings and sequences walked); `infinite`: the dotted paths where an
    infinity means something (a NaN never does)."""
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    for key, value in items:
        name = f"{path}.{key}" if path else str(key)
        if isinstance(value, Mapping | list | tuple):
            check_finite(value, name, infinite)
        elif (isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
              and not math.isfinite(value) and not (math.isinf(value) and name in infinite)):
            raise invalid("config", name, value, "must be a finite number")
