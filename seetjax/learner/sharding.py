"""Where the learner's arrays live on the (data, fsdp, tensor) mesh.

Parameters (and the optimizer moments that mirror them) follow their logical axes through the rule
table of their model family; batches are split over the batch axes (data and fsdp) along rows and
replicated over tensor. In a multi-process run every process passes its own rows and
`global_batch` assembles the global arrays without any process holding all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from seetjax.models.config import ModelConfig
from seetjax.runtime import sharding

Rules = Sequence[tuple[str, Sequence[str]]]

# Logical-axis rules per model family. Qwen2 and Llama share one layout today (heads, kv heads,
# MLP and vocabulary over tensor; embed over fsdp); a family that needs another registers it here.
FAMILY_RULES: dict[str, Rules] = {
    "qwen2": sharding.DEFAULT_RULES,
    "llama": sharding.DEFAULT_RULES,
}


def family_rules(cfg: ModelConfig) -> Rules:
    try:
        return FAMILY_RULES[cfg.model_type]
    except KeyError:
        raise KeyError(f"no sharding rules for model_type {cfg.model_type!r}; "
                       f"known: {sorted(FAMILY_RULES)}") from None


def mesh_from_config(sizes: tuple[int, int, int],
                     devices: Sequence[jax.Device] | None = None) -> Mesh:
    return sharding.make_mesh(*sizes, devices=devices)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def tree_shardings(tree: Any, mesh: Mesh, rules: Rules) -> Any:
    """Shardings for any pytree holding `nnx.State`s (params, optimizer state, train state):
    variables by their logical axes, every other array replicated."""

    def one(node: Any) -> Any:
        if isinstance(node, nnx.State):
            return sharding.state_shardings(node, mesh, rules)
        return replicated(mesh)

    return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, nnx.State))


def batch_shardings(batch: Any, mesh: Mesh, rules: Rules = sharding.DEFAULT_RULES,
                    rows_scale: int = 1) -> Any:
    """Rows of every array of `batch` over the batch mesh axes (`rows_scale`: global rows per
    row of `batch`, the process count when `batch` holds one process's rows)."""

    def one(x: Any) -> NamedSharding:
        shape = (np.shape(x)[0] * rows_scale, *np.shape(x)[1:])
        return sharding.named(mesh, ("batch",) + (None,) * (len(shape) - 1), shape, rules)

    return jax.tree.map(one, batch)


def global_batch(local: Any, mesh: Mesh, rules: Rules = sharding.DEFAULT_RULES) -> Any:
    """The global batch from this process's rows (numpy or jax arrays, host-local). With one
    process, the rows are the whole batch."""
    shardings = batch_shardings(local, mesh, rules, rows_scale=jax.process_count())
    return jax.tree.map(lambda x, s: jax.make_array_from_process_local_data(s, np.asarray(x)),
                        local, shardings)
