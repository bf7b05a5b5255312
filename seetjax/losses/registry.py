"""Losses and advantage estimators registered by name, each with its config class.

A config class is a frozen dataclass whose `__post_init__` validates every field and raises
ValueError naming the class and the field; `make_config` also names a field the class does not
have. Configs are hashable: they are static arguments of the jitted learner step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from seetjax.errors import invalid, require

KINDS = ("loss", "advantage")


@dataclasses.dataclass(frozen=True)
class Registered:
    name: str
    kind: str
    fn: Callable[..., Any]
    config_cls: type


_REGISTRY: dict[tuple[str, str], Registered] = {}


def register(name: str, config_cls: type, kind: str = "loss") -> Callable[[Callable], Callable]:
    """Decorator: registers `fn` under (kind, name) with the config class it takes."""
    if kind not in KINDS:
        raise ValueError(f"register: kind {kind!r} not in {KINDS}")

    def add(fn: Callable) -> Callable:
        if (kind, name) in _REGISTRY:
            raise ValueError(f"{kind} {name!r} is already registered")
        _REGISTRY[(kind, name)] = Registered(name, kind, fn, config_cls)
        return fn

    return add


def get(name: str, kind: str = "loss") -> Registered:
    try:
        return _REGISTRY[(kind, name)]
    except KeyError:
        raise KeyError(f"unknown {kind} {name!r}; registered: {names(kind)}") from None


def names(kind: str = "loss") -> list[str]:
    return sorted(n for k, n in _REGISTRY if k == kind)


def make_config(name: str, fields: Mapping[str, Any] | None = None, kind: str = "loss") -> Any:
    """The registered config of `name` built from `fields`, validated."""
    cls = get(name, kind).config_cls
    return build_dataclass(cls, fields or {})


def build_dataclass(cls: type, fields: Mapping[str, Any]) -> Any:
    """`cls(**fields)`, failing with the unknown field named instead of a bare TypeError."""
    known = {f.name for f in dataclasses.fields(cls)}
    for key in fields:
        if key not in known:
            raise invalid(cls, key, fields[key], f"no such field; fields: {sorted(known)}")
    return cls(**fields)


def check(ok: bool, config: Any, field: str, requirement: str) -> None:
    """Raises ValueError('Cls.field=value: requirement') unless `ok` (`seetjax.errors.require`
    with the value read from `config`)."""
    require(ok, config, field, getattr(config, field), requirement)
