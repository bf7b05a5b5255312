"""The one shape of a bad-input error: `Owner.field=value: requirement`.

`Owner` is a class name (`EpisodeLimits`), or a config path (`config.rl.sampling`) where the
value came from a config file; `value` is its repr, shortened past `MAX_VALUE_CHARS`, e.g.
`EpisodeLimits.max_steps=0: must be >= 1 or None`. Imported by anything (the lowest layer).
"""

from __future__ import annotations

from typing import Any

MAX_VALUE_CHARS = 80


def _owner_name(owner: Any) -> str:
    if isinstance(owner, str):
        return owner
    return owner.__name__ if isinstance(owner, type) else type(owner).__name__


def show(value: Any) -> str:
    """`repr(value)`, cut to `MAX_VALUE_CHARS` with `...` where longer (a corpus, a prompt)."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


def invalid(owner: Any, field: str, value: Any, requirement: str,
            kind: type[Exception] = ValueError) -> Exception:
    """The error to raise: `kind("Owner.field=value!r: requirement")`; `owner` a class, an
    instance or a name."""
    return kind(f"{_owner_name(owner)}.{field}={show(value)}: {requirement}")


def require(ok: bool, owner: Any, field: str, value: Any, requirement: str,
            kind: type[Exception] = ValueError) -> None:
    """Raises `invalid(owner, field, value, requirement, kind)` unless `ok`."""
    if not ok:
        raise invalid(owner, field, value, requirement, kind)


def require_int(owner: Any, field: str, value: Any, least: int, note: str = "") -> None:
    """Raises `Owner.field=value: must be an integer >= least` (then `note`) unless `value` is an
    int (not a bool: `True` would pass for 1) of at least `least`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise invalid(owner, field, value, f"must be an integer >= {least}{note}")
