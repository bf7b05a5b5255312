"""Checkpoints of the train state with orbax: parameters, optimizer state, step, RNG and skip count,
plus the caller's state as JSON (curriculum progress, anchor pool, data iterator position).

Saves are asynchronous (the device-to-host copy happens before `save` returns, the writing in the
background) and atomic: a checkpoint interrupted by a crash is never listed, so a run killed at any
moment resumes from its last complete one; one damaged after it was written (a truncated or
deleted file) is set aside and the one before it restored (`restore_intact`). Retention keeps the
last `keep_last` checkpoints and, with `best_metric`, also the `keep_best` best ones by that
metric. Frozen parts (LoRA base, reference model) are not saved: they come from the model the
learner was created from. A state whose parameters are not finite is never saved. A checkpoint
holds one `TrainState` or several by name (`{"coordinator": ..., "worker": ...}`: a run training
a parameter set per role); it restores into a template of the same form.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

from seetjax.learner.state import TrainState

log = logging.getLogger(__name__)

# The TrainState fields a checkpoint holds.
SAVED_FIELDS = ("step", "params", "opt_state", "rng", "skipped")
# What a checkpoint holds: one state, or states by name.
States = TrainState | Mapping[str, TrainState]


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def _saved(state: States) -> dict[str, Any]:
    if isinstance(state, TrainState):
        return {name: getattr(state, name) for name in SAVED_FIELDS}
    return {name: _saved(s) for name, s in state.items()}


def _restored(template: States, saved: dict[str, Any]) -> States:
    if isinstance(template, TrainState):
        return template.replace(**saved)
    return {name: _restored(s, saved[name]) for name, s in template.items()}


def _params(state: States) -> Any:
    return state.params if isinstance(state, TrainState) else [s.params for s in state.values()]


class Checkpointer:
    """Saves and restores `TrainState`s (or `States`) under `directory` (one sub-directory per
    step)."""

    def __init__(self, directory: str | os.PathLike, *, keep_last: int = 3, keep_best: int = 0,
                 best_metric: str | None = None, best_mode: str = "max",
                 async_save: bool = True):
        if keep_last < 1:
            raise ValueError(f"Checkpointer: keep_last={keep_last} must be >= 1")
        if best_mode not in ("max", "min"):
            raise ValueError(f"Checkpointer: best_mode={best_mode!r} must be 'max' or 'min'")
        if keep_best and not best_metric:
            raise ValueError("Checkpointer: keep_best needs best_metric")
        self.best_metric = best_metric
        best_fn = (lambda metrics: metrics[best_metric]) if best_metric else None
        policies = [checkpoint_managers.LatestN(n=keep_last)]
        if keep_best:
            policies.append(checkpoint_managers.BestN(
                get_metric_fn=best_fn, n=keep_best, reverse=best_mode == "min",
                keep_checkpoints_without_metrics=False))
        # best_fn also makes orbax write each checkpoint's metrics and read them back on restart,
        # so the ranking survives a resume.
        options = ocp.CheckpointManagerOptions(
            preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies),
            best_fn=best_fn, best_mode=best_mode, enable_async_checkpointing=async_save,
            create=True, cleanup_tmp_directories=True)  # leftovers of a killed run
        # orbax wants absolute paths; a run started in a relative workdir must still save.
        self._manager = ocp.CheckpointManager(os.path.abspath(directory), options=options)

    def save(self, step: int, state: States, *, caller_state: dict | None = None,
             metrics: dict[str, float] | None = None) -> bool:
        """Starts saving `state` as checkpoint `step`; returns False (and saves nothing) when
        its parameters are not finite. `metrics` rank checkpoints for keep-best (they must hold
        `best_metric`)."""
        if not bool(_all_finite(_params(state))):
            log.error("checkpoint %d not saved: the parameters are not finite", step)
            return False
        if self.best_metric is not None and (metrics is None or self.best_metric not in metrics):
            raise ValueError(f"Checkpointer.save: metrics must hold {self.best_metric!r}")
        args = ocp.args.Composite(state=ocp.args.StandardSave(_saved(state)),
                                  caller=ocp.args.JsonSave(caller_state or {}))
        return self._manager.save(step, args=args, metrics=metrics, force=True)

    def restore(self, template: States, step: int | None = None) -> tuple[States, dict]:
        """(state, caller_state) of checkpoint `step` (default: the latest). `template` gives the
        structure, shardings and the frozen parts (e.g. a fresh `create_learner` state)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self._manager.directory}")
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            _saved(template))
        restored = self._manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), caller=ocp.args.JsonRestore()))
        return _restored(template, restored["state"]), dict(restored["caller"] or {})

    def restore_intact(self, template: States) -> tuple[States, dict, int] | None:
        """(state, caller_state, step) of the newest checkpoint that restores, or None when there
        is none. A damaged one (a truncated or missing file, empty metadata: whatever fails to
        read) is moved aside to `damaged-<step>` for inspection, with a warning naming it, and
        the one before it is tried."""
        for step in sorted(self.all_steps(), reverse=True):
            try:
                state, caller = self.restore(template, step)
            except Exception as e:  # noqa: BLE001 - any failure to read it means it is damaged
                kept = self._set_aside(step)
                log.warning("checkpoint %d is damaged (%s: %s); moved to %s, trying the one "
                            "before it", step, type(e).__name__, str(e)[:300], kept)
                continue
            return state, caller, step
        return None

    def _set_aside(self, step: int) -> str:
        directory = os.path.join(str(self._manager.directory), str(step))
        target = os.path.join(str(self._manager.directory), f"damaged-{step}")
        suffix = 1
        while os.path.exists(target):
            target = os.path.join(str(self._manager.directory), f"damaged-{step}.{suffix}")
            suffix += 1
        if jax.process_index() == 0:
            os.rename(directory, target)
        self._manager.reload()
        return target

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        """The step with the best `best_metric` (the latest without one)."""
        return self._manager.best_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def wait(self) -> None:
        """Blocks until every started save is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()
