"""Reading a distillation config: a YAML file, `--set a.b=value` overrides (values read as YAML:
`--set concurrency.max_workers=32`, `--set teacher_pool.0.weight=3`), validated into the typed
models of `seetjax.distill.config`, then checked against what needs the registries and the
environment (scenario families, validators, retried reasons, API-key variables, a writable
output). Every error names the field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from seetjax.distill.config import ConfigError, DistillConfig, field_path
from seetjax.distill.flow import FLOW_REASONS
from seetjax.distill.scenarios import FAMILIES
from seetjax.distill.validators import VALIDATORS


def parse_config(raw: Mapping[str, Any]) -> DistillConfig:
    """Validates a config mapping; raises ConfigError naming every field at fault, then checks
    what needs the registry and the environment (families, API-key variables, a local output
    that can be written)."""
    try:
        config = DistillConfig.model_validate(raw)
    except ValidationError as e:
        lines = []
        for error in e.errors():
            message = error["msg"].removeprefix("Value error, ")
            path = field_path(error["loc"])
            lines.append(f"{path}: {message}" if path else message)
        raise ConfigError("bad distillation config:\n  " + "\n  ".join(lines)) from None
    for i, spec in enumerate(config.scenarios):
        if spec.family not in FAMILIES:
            raise ConfigError(f"scenarios[{i}].family: unknown family {spec.family!r}; one of "
                              f"{sorted(FAMILIES)}")
        try:
            FAMILIES[spec.family].check(spec)
        except ValueError as e:
            raise ConfigError(f"scenarios[{i}].params: {e}") from None
    for i, name in enumerate(config.validation.validators):
        if name not in VALIDATORS:
            raise ConfigError(f"validation.validators[{i}]: unknown validator {name!r}; one of "
                              f"{sorted(VALIDATORS)}")
    reasons = {*VALIDATORS, *FLOW_REASONS}
    for i, reason in enumerate(config.retry_failed):
        if reason not in reasons:
            raise ConfigError(f"retry_failed[{i}]: {reason!r} is no rejection reason; one of "
                              f"{sorted(reasons)}")
    for field, pool in (("teacher_pool", config.teacher_pool),
                        ("reviewer_pool", config.reviewer_pool)):
        for i, endpoint in enumerate(pool):
            if endpoint.api_key_env and not os.environ.get(endpoint.api_key_env):
                raise ConfigError(f"{field}[{i}].api_key_env: ${endpoint.api_key_env} is not set "
                                  f"(endpoint {endpoint.name!r})")
    output = config.output
    for field, url in (("output.url", output.url), ("output.state_dir", output.state_dir)):
        if url and ("://" not in url or url.startswith("file://")):
            _check_writable(field, url.removeprefix("file://"))
    return config


def _check_writable(field: str, path: str) -> None:
    """Refuses a local directory that cannot be created or written, creating nothing (a run
    would otherwise fail on its first write, after its endpoint checks)."""
    existing = Path(path)
    while not existing.exists():  # the deepest part of the path that exists
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{field}: {path!r} cannot be created: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: {path!r} cannot be written: {existing} is not writable")


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """`a.b.0.c=value` assignments (values read as YAML) applied to a config mapping."""
    for item in overrides:
        path, sep, value = item.partition("=")
        if not sep or not path:
            raise ConfigError(f"override {item!r}: expected field.path=value")
        node: Any = raw
        parts = path.split(".")
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"override {item!r}: {'.'.join(parts[:depth + 1])} is not "
                                      f"an index of a list of {len(node)}")
                key: Any = int(part)
            elif isinstance(node, dict):
                key = part
            else:
                raise ConfigError(f"override {item!r}: {'.'.join(parts[:depth])} is not a "
                                  "mapping or list")
            if last:
                node[key] = yaml.safe_load(value)
            else:
                if isinstance(node, dict):
                    node = node.setdefault(key, {})
                else:
                    node = node[key]
    return raw


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> DistillConfig:
    """Reads a YAML config, applies overrides, validates (see the module docstring)."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{os.fspath(path)}: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{os.fspath(path)}: a config is a YAML mapping")
    return parse_config(apply_overrides(raw, overrides))
