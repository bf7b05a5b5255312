"""Exact keys of environment states: equal keys iff equal states, for GiGPO's step groups.

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training") compares
the actions a group's episodes took from an identical environment state (`gigpo` in
`seetjax.losses.advantages`). An environment that can say what its state is (`KeyedState`: BFCL,
generated tasks, QA search) gets a key per assistant reply from the rollout (`state_key`), the
SHA-256 of a canonical serialisation of `state_view()`:

- values, not identities or histories: dicts and sets compare unordered (the order of a dict's
  insertions is not state, as in BFCL's state check, which compares attributes with `!=`), so two
  episodes that reach one state by different call orders get one key;
- objects by their class and attributes, sorted by name, less `IGNORED` (wall-clock timestamps);
  random generators by their state (it decides the ids an API draws next);
- an object met twice (a parent link, a current directory that is also in the tree) is written
  the second time as a reference to its first place, so cycles end and aliasing counts;
- iteratively: the model decides how deep a directory tree goes (`seetjax.envs.state_copy`).

What a state is (the environment's view) is each environment's call: the world the tools act
on, the turn (so the pending user message), and the tool outputs seen so far as a multiset (the
checker's and the policy's information); not the conversation's order, not a step counter.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import random
import types
from typing import Any, Protocol, runtime_checkable

# Attributes that are not state: BFCL's File stamps each file with the wall clock at creation.
IGNORED = frozenset({"_last_modified"})
_ATOMS = (type(None), bool, int, float, str, bytes)
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType)


@runtime_checkable
class KeyedState(Protocol):
    def state_view(self) -> Any:
        """What the rest of the episode depends on, as plain values and objects (see the module
        docstring); two episodes with equal views are in the same state."""
        ...


def state_key(env: Any) -> str | None:
    """The key of `env`'s current state (a hex SHA-256), or None where the environment does not
    say what its state is (its replies then form no step group)."""
    if not isinstance(env, KeyedState):
        return None
    return state_digest(env.state_view())


def state_digest(value: Any) -> str:
    """SHA-256 (hex) of `value`'s canonical serialisation (see the module docstring)."""
    digest = hashlib.sha256()
    for token in canonical_tokens(value):
        data = token.encode("utf-8", "surrogatepass")
        digest.update(b"%d:" % len(data) + data)  # length-prefixed: no two streams collide
    return digest.hexdigest()


def canonical_tokens(value: Any) -> list[str]:
    """The canonical serialisation of `value` as a token list, built with an explicit stack."""
    out: list[str] = []
    seen: dict[int, int] = {}  # id -> order of first visit, for references
    alive: list[Any] = []  # visited items stay alive: a freed temporary's id could come again
    stack: list[tuple[bool, Any]] = [(False, value)]  # (is a finished token, item)
    while stack:
        done, item = stack.pop()
        if done:
            out.append(item)
            continue
        if isinstance(item, _ATOMS):
            out.append(_atom(item))
            continue
        if id(item) in seen:
            out.append(f"@{seen[id(item)]}")
            continue
        seen[id(item)] = len(seen)
        alive.append(item)
        head, children = _expand(item)
        out.append(head)
        stack.append((True, ")"))
        stack.extend((False, c) if not isinstance(c, _Label) else (True, c.text)
                     for c in reversed(children))
    return out


class _Label:
    """A finished token among an item's children (a dict key, an attribute name)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _atom(value: Any) -> str:
    return f"{type(value).__name__}:{value!r}"


def _sort_key(value: Any) -> str:
    """An order for dict keys and set members: their own digest (any hashable value)."""
    return _atom(value) if isinstance(value, _ATOMS) else state_digest(value)


def _expand(item: Any) -> tuple[str, list[Any]]:
    """(the token that opens `item`, its children in canonical order)."""
    if isinstance(item, dict):
        pairs = sorted(item.items(), key=lambda kv: _sort_key(kv[0]))
        return f"dict:{type(item).__name__}(", [x for k, v in pairs for x in (k, v)]
    if isinstance(item, (list, tuple)):
        return f"seq:{type(item).__name__}(", list(item)
    if isinstance(item, (set, frozenset)):
        return "set(", sorted(item, key=_sort_key)
    if isinstance(item, random.Random):
        return "random(", [item.getstate()]
    if isinstance(item, enum.Enum):
        return f"enum:{type(item).__qualname__}.{item.name}(", []
    if isinstance(item, (datetime.date, datetime.time, datetime.timedelta)):
        return f"time:{item!r}(", []
    if isinstance(item, _OPAQUE):
        return f"code:{getattr(item, '__module__', '')}.{getattr(item, '__qualname__', '')}(", []
    if hasattr(item, "__dict__"):
        names = sorted(n for n in vars(item) if n not in IGNORED)
        return (f"obj:{type(item).__module__}.{type(item).__qualname__}(",
                [x for n in names for x in (_Label(n), vars(item)[n])])
    raise TypeError(f"state_digest: cannot key a {type(item).__qualname__} value; give a "
                    "state_view of plain values and objects")
