"""Shipped configs with fields changed, the way `--config.a.b=value` changes them on a command
line (types unchecked, so a test can set a bad value and see it refused)."""

from pathlib import Path
from typing import Any

import ml_collections

from seetjax.config.sections import load_config_file

ROOT = Path(__file__).resolve().parents[1]


def config_with(name: str, changes: dict[str, Any]) -> ml_collections.ConfigDict:
    """`configs/<name>.py`'s config with each dotted path in `changes` set to its value."""
    config = load_config_file(ROOT / "configs" / f"{name}.py")
    for path, value in changes.items():
        *sections, key = path.split(".")
        section = config
        for part in sections:
            section = section[part]
        with section.ignore_type():
            section[key] = value
    return config
