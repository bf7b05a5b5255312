"""Device mesh and logical-axis sharding rules, shared by models, sampler and learner.

Parameters carry logical axis names in their `axes` metadata (`("embed", "mlp")`); a rule table maps
each logical name to mesh axes of a `Mesh` with axes (data, fsdp, tensor). A mesh axis that does not
divide a dimension is dropped for that dimension (replicated) instead of failing, so one rule table
serves every model size, e.g. 2 KV heads on a tensor axis of 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from seetjax.errors import invalid

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axes. Batch is split over data and fsdp (fsdp shards params AND batch).
DEFAULT_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("batch", ("data", "fsdp")),
    ("vocab", ("tensor",)),
    ("embed", ("fsdp",)),
    ("heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("mlp", ("tensor",)),
)


def mesh_sizes(sizes: Sequence[int], devices: int) -> tuple[int, int, int]:
    """(data, fsdp, tensor) laid out over `devices`: one size may be -1 (the rest), the others
    >= 1, their product the device count."""
    sizes = list(sizes)
    if sizes.count(-1) > 1 or any(s == 0 or s < -1 for s in sizes):
        raise invalid("make_mesh", "data, fsdp, tensor", tuple(sizes),
                      "each >= 1, at most one -1")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if devices % known:
            raise invalid("make_mesh", "data, fsdp, tensor", tuple(sizes),
                          f"{devices} devices do not divide into them")
        sizes[sizes.index(-1)] = devices // known
    if int(np.prod(sizes)) != devices:
        raise invalid("make_mesh", "data, fsdp, tensor", tuple(sizes),
                      f"their product must be the {devices} devices")
    return tuple(sizes)


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (default: all); one size may be -1 (the rest)."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = mesh_sizes((data, fsdp, tensor), len(devices))
    grid = np.asarray(devices, dtype=object).reshape(sizes)
    return Mesh(grid, MESH_AXES)


def logical_to_spec(axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Sequence[tuple[str, Sequence[str]]] = DEFAULT_RULES) -> PartitionSpec:
    """PartitionSpec for an array of `shape` whose dimensions have logical names `axes`."""
    if len(axes) != len(shape):
        raise ValueError(f"logical axes {tuple(axes)} do not match shape {tuple(shape)}")
    table = dict(rules)
    used: set[str] = set()
    spec: list[Any] = []
    for name, dim in zip(axes, shape):
        chosen = []
        size = 1
        for mesh_axis in table.get(name, ()) if name else ():
            n = mesh.shape[mesh_axis]
            if mesh_axis in used or n == 1 or dim % (size * n):
                continue
            chosen.append(mesh_axis)
            size *= n
        used.update(chosen)
        spec.append(None if not chosen else chosen[0] if len(chosen) == 1 else tuple(chosen))
    return PartitionSpec(*spec)


def named(mesh: Mesh, axes: Sequence[str | None], shape: Sequence[int],
          rules: Sequence[tuple[str, Sequence[str]]] = DEFAULT_RULES) -> NamedSharding:
    """NamedSharding of an array of `shape` with logical `axes` on `mesh`."""
    return NamedSharding(mesh, logical_to_spec(axes, shape, mesh, rules))


def batch_multiple(mesh: Mesh | None,
                   rules: Sequence[tuple[str, Sequence[str]]] = DEFAULT_RULES) -> int:
    """How many ways the batch axis is split on `mesh` (1 without a mesh)."""
    if mesh is None:
        return 1
    return int(np.prod([mesh.shape[a] for a in dict(rules)["batch"]]))


def _is_variable(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def state_shardings(state: Any, mesh: Mesh,
                    rules: Sequence[tuple[str, Sequence[str]]] = DEFAULT_RULES) -> Any:
    """NamedSharding tree for an `nnx.State` (variables without `axes` are replicated)."""

    def one(v: nnx.Variable) -> nnx.Variable:
        axes = v.get_metadata().get("axes")
        shape = v.get_value().shape
        spec = logical_to_spec(axes, shape, mesh, rules) if axes else PartitionSpec()
        return v.replace(NamedSharding(mesh, spec))

    return jax.tree.map(one, state, is_leaf=_is_variable)


def shard_state(state: Any, mesh: Mesh,
                rules: Sequence[tuple[str, Sequence[str]]] = DEFAULT_RULES) -> Any:
    """Places every array of `state` on `mesh` according to its logical axes."""
    return jax.device_put(state, state_shardings(state, mesh, rules))
