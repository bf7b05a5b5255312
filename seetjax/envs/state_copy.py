"""Deep copies of episode state whose depth the model controls.

`copy.deepcopy` recurses once per level of nesting, and the model sets how deep GorillaFileSystem's
directory tree goes (180 `mkdir` + `cd` calls reach Python's recursion limit). `deepcopy_state`
copies every Directory and File node first, iteratively, into the memo, so the deepcopy of the
rest finds them there and never descends a tree.
"""

from __future__ import annotations

import copy
import functools
import sys
import types
from typing import Any

from seetjax.envs.bfcl.data import api_class

# Not entered by the walk: deepcopy shares them rather than copying their insides.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


@functools.cache
def _node_types() -> tuple[type, type]:
    module = sys.modules[api_class("GorillaFileSystem").__module__]
    return module.Directory, module.File


def deepcopy_state(state: Any, memo: dict[int, Any]) -> Any:
    """`copy.deepcopy(state, memo)`, with directory trees of any depth."""
    directory, file = _node_types()
    nodes = [n for n in _reachable(state, memo) if type(n) in (directory, file)]
    for node in nodes:  # shallow copies first: every node has its copy before links are mended
        clone = object.__new__(type(node))
        clone.__dict__.update(node.__dict__)  # names, contents and timestamps are immutable
        memo[id(node)] = clone
    for node in nodes:
        if type(node) is directory:
            clone = memo[id(node)]
            clone.contents = {k: memo[id(v)] for k, v in node.contents.items()}
            clone.parent = None if node.parent is None else memo[id(node.parent)]
    return copy.deepcopy(state, memo)


def _reachable(root: Any, memo: dict[int, Any]) -> list[Any]:
    """Objects reachable from `root` through containers and instance attributes, found without
    recursion (objects already in `memo` are not entered)."""
    seen, stack, out = set(), [root], []
    while stack:
        item = stack.pop()
        if id(item) in seen or id(item) in memo or isinstance(item, (str, bytes, int, float)):
            continue
        seen.add(id(item))
        out.append(item)
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif hasattr(item, "__dict__") and not isinstance(item, _OPAQUE):
            stack.extend(vars(item).values())
    return out
