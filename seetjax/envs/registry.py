"""Environments by name: what a run config's `env.name` selects.

An `EnvSpec` names an environment's config section (a frozen dataclass: `config.env` of a run
config, less `name`), how to make a fresh environment from it (a `ToolEnv`, one per episode), how
to load its tasks and check a run config's task side (`data`, evaluation splits) before anything
loads. A new environment joins with one call, `register(EnvSpec(...))`; the rollout finds an
environment's spec from its section's type (`make_env`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from seetjax.envs.base import ToolEnv
from seetjax.envs.bfcl.env import BfclEnv, BfclEnvConfig
from seetjax.envs.qa_search import run as qa_search
from seetjax.envs.task_source import check_run_data, load_run_tasks
from seetjax.errors import invalid

DEFAULT = "bfcl"


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """name: what `env.name` says. config: the section's dataclass. make: section -> a fresh
    environment. load_tasks: (section, the run config's `data` section, split, count: the first
    N tasks, None for all) -> tasks, each one `reset` accepts. check_data: (section, `data`,
    evaluation split -> its tasks per category) -> None, raising a ValueError that names the field
    (`config.data.split: ...`) where `load_tasks` would fail; None: nothing to check.
    scores_episodes: its environments score their own episodes
    (`capabilities.ScoresEpisodes`), so `reward.kind="env"` applies."""

    name: str
    config: type
    make: Callable[[Any], ToolEnv]
    load_tasks: Callable[[Any, Mapping[str, Any], str, int | None], list[Any]]
    check_data: Callable[[Any, Mapping[str, Any], Mapping[str, int]], None] | None = None
    scores_episodes: bool = False


_SPECS: dict[str, EnvSpec] = {}


def register(spec: EnvSpec) -> EnvSpec:
    """Adds `spec`; its name and its section class must be new."""
    if spec.name in _SPECS:
        raise invalid(spec, "name", spec.name, "already registered")
    if any(s.config is spec.config for s in _SPECS.values()):
        raise invalid(spec, "config", spec.config, "already another environment's section")
    _SPECS[spec.name] = spec
    return spec


def names() -> tuple[str, ...]:
    return tuple(_SPECS)


def spec(name: str) -> EnvSpec:
    if name not in _SPECS:
        raise invalid("env", "name", name, f"one of {names()}")
    return _SPECS[name]


def spec_of(config: Any) -> EnvSpec:
    """The spec whose section `config` is."""
    for s in _SPECS.values():
        if type(config) is s.config:
            return s
    raise invalid("spec_of", "config", config, "no registered environment's section; the "
                  f"sections are {[s.config.__name__ for s in _SPECS.values()]}", TypeError)


def make_env(config: Any) -> ToolEnv:
    """A fresh environment of the section `config`."""
    return spec_of(config).make(config)


register(EnvSpec(DEFAULT, BfclEnvConfig, BfclEnv, load_run_tasks, check_run_data))
register(EnvSpec(qa_search.NAME, qa_search.QASearchRunConfig, qa_search.make_env,
                 qa_search.load_tasks, qa_search.check_data, scores_episodes=True))
