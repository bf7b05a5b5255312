"""Checkpoints of the train state with orbax: parameters, optimizer state, step, RNG and skip count,
plus the caller's state as JSON (curriculum progress, anchor pool, data iterator position).

Saves are asynchronous (the device-to-host copy happens before `save` returns, the writing in the
background) and atomic: a checkpoint interrupted by a crash is never listed, so a run killed at any
moment resumes from its last complete one. Each checkpoint holds a checksum of every array and
of the caller's state, verified on restore, so one damaged after it was written (a truncated,
deleted or silently altered file, a flipped byte) is set aside and the one before it restored
(`restore_intact`); when none is left, restoring is refused (`DamagedCheckpoints`) rather than
starting over. A save that fails in the background (a full disk) is reported at the next save
or `wait`, naming the checkpoint it lost. Retention keeps the
last `keep_last` checkpoints and, with `best_metric`, also the `keep_best` best ones by that
metric. Frozen parts (LoRA base, reference model) are not saved: they come from the model the
learner was created from. A state whose parameters are not finite is never saved. A checkpoint
holds one `TrainState` or several by name (`{"coordinator": ..., "worker": ...}`: a run training
a parameter set per role); it restores into a template of the same form.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers

from seetjax.errors import invalid
from seetjax.learner.state import TrainState
from seetjax.runtime.workdir import DISK_FULL

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


class DamagedCheckpoints(RuntimeError):
    """A directory held checkpoints and none of them restores: nothing to resume from."""


class ChecksumError(ValueError):
    """A checkpoint read back differs from what was saved."""


# The item beside `state` and `caller` holding their checksums.
_CHECKSUMS = "checksums"


def _words(x: jax.Array) -> jax.Array:
    """`x`'s bits as uint32 words (narrower types widened), in `x`'s layout: no reshape, so a
    sharded array is fingerprinted where it lies."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    if x.dtype.itemsize >= 4:  # 8-byte types gain a trailing axis of two words
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    unsigned = jnp.dtype(f"uint{8 * x.dtype.itemsize}")
    return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)


def _fingerprint(x: jax.Array) -> jax.Array:
    """[sum of the words, sum of word x position] modulo 2^32: exact whatever the reduction
    order or sharding; any one changed byte changes the first, moved words the second."""
    words = _words(x)
    position = jnp.ones(words.shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(words.ndim)):
        iota = jax.lax.broadcasted_iota(jnp.uint32, words.shape, axis)
        position = position + iota * jnp.uint32(stride % 2**32)
        stride *= words.shape[axis]
    return jnp.stack([jnp.sum(words, dtype=jnp.uint32),
                      jnp.sum(words * position, dtype=jnp.uint32)])


_fingerprints = jax.jit(lambda tree: jax.tree.map(_fingerprint, tree))


def _checksums(saved: dict[str, Any], caller: dict) -> dict[str, Any]:
    """What a checkpoint's `checksums` item holds: each array's fingerprint by its path, and
    the SHA-256 of the caller's state as JSON."""
    flat = jax.tree_util.tree_flatten_with_path(_fingerprints(saved))[0]
    arrays = {jax.tree_util.keystr(path): np.asarray(x.addressable_data(0)).tolist()
              for path, x in flat}
    text = json.dumps(caller, sort_keys=True)
    return {"arrays": arrays, "caller": hashlib.sha256(text.encode()).hexdigest()}


def _verify(saved: dict[str, Any], caller: dict, expected: Mapping[str, Any]) -> None:
    """Raises ChecksumError naming what differs from the checksums written at save."""
    got = _checksums(saved, caller)
    wrong = [name for name, value in got["arrays"].items()
             if expected["arrays"].get(name) != value]
    wrong += [name for name in expected["arrays"] if name not in got["arrays"]]
    if got["caller"] != expected["caller"]:
        wrong.append("the caller state")
    if wrong:
        raise ChecksumError(f"checksum mismatch in {len(wrong)} item(s): {', '.join(wrong[:5])}")


def _everywhere(ok: bool) -> bool:
    """Whether `ok` holds on every process (they must agree on which checkpoint to take)."""
    if jax.process_count() == 1:
        return ok
    return bool(np.all(multihost_utils.process_allgather(np.asarray(ok))))


def _write_error(step: int | None, error: BaseException) -> BaseException:
    """`error` of a background save as one naming the checkpoint it lost: an OSError with its
    errno when one caused it (a full disk said in words), a RuntimeError otherwise."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    full = (cause is not None and cause.errno in DISK_FULL) or "No space left" in str(error)
    what = "the disk is full" if full else f"{type(error).__name__}: {error}"
    where = f" ({cause.filename})" if cause is not None and cause.filename else ""
    message = f"checkpoint {step} was not written: {what}{where}"
    if full or cause is not None:
        return OSError(errno.ENOSPC if full else cause.errno, message)
    return RuntimeError(message)


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
            raise invalid(self, "keep_last", keep_last, "must be >= 1")
        if best_mode not in ("max", "min"):
            raise invalid(self, "best_mode", best_mode, "one of 'max', 'min'")
        if keep_best and not best_metric:
            raise invalid(self, "keep_best", keep_best, "needs best_metric")
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
        self._pending: int | None = None  # the step whose save runs in the background
        self._failed = False  # a save failed: reported once, the manager is done

    def save(self, step: int, state: States, *, caller_state: dict | None = None,
             metrics: dict[str, float] | None = None) -> bool:
        """Starts saving `state` as checkpoint `step`; returns False (and saves nothing) when
        its parameters are not finite. `metrics` rank checkpoints for keep-best (they must hold
        `best_metric`)."""
        if not bool(_all_finite(_params(state))):
            log.error("checkpoint %d not saved: the parameters are not finite", step)
            return False
        if self.best_metric is not None and (metrics is None or self.best_metric not in metrics):
            raise invalid("Checkpointer.save", "metrics", metrics,
                          f"must hold best_metric={self.best_metric!r}")
        self.wait()  # a failed earlier save is reported before this one starts
        saved, caller = _saved(state), caller_state or {}
        args = ocp.args.Composite(state=ocp.args.StandardSave(saved),
                                  caller=ocp.args.JsonSave(caller),
                                  **{_CHECKSUMS: ocp.args.JsonSave(_checksums(saved, caller))})
        self._pending = step
        try:
            return self._manager.save(step, args=args, metrics=metrics, force=True)
        except Exception as e:
            raise self._lost(e) from e

    def restore(self, template: States, step: int | None = None) -> tuple[States, dict]:
        """(state, caller_state) of checkpoint `step` (default: the latest). `template` gives the
        structure, shardings and the frozen parts (e.g. a fresh `create_learner` state)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self._manager.directory}")
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
            _saved(template))
        checked = os.path.isdir(os.path.join(str(self._manager.directory), str(step), _CHECKSUMS))
        items = {"state": ocp.args.StandardRestore(abstract), "caller": ocp.args.JsonRestore()}
        if checked:
            items[_CHECKSUMS] = ocp.args.JsonRestore()
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        caller = dict(restored["caller"] or {})
        if checked:
            _verify(restored["state"], caller, restored[_CHECKSUMS])
        else:
            log.warning("checkpoint %d has no checksums (written before they were kept): "
                        "restored unverified", step)
        return _restored(template, restored["state"]), caller

    def restore_intact(self, template: States,
                       check: Callable[[int, dict], Any] | None = None
                       ) -> tuple[States, dict, int] | None:
        """(state, caller_state, step) of the newest checkpoint that restores, verifies and
        passes `check(step, caller_state)` (which raises on what the caller finds damaged);
        None when the directory never held one. A damaged one (a truncated, missing or altered
        file, a checksum that differs) is moved aside to `damaged-<step>` for inspection, with
        a warning naming it, and the one before it is tried. Raises DamagedCheckpoints when
        none is left, now or from an earlier attempt."""
        lost = []
        for step in sorted(self.all_steps(), reverse=True):
            reason = "another process could not read it"
            try:
                state, caller = self.restore(template, step)
                if check is not None:
                    check(step, caller)
                ok = True
            except Exception as e:  # noqa: BLE001 - any failure to read it means it is damaged
                reason, ok = f"{type(e).__name__}: {str(e)[:300]}", False
            if _everywhere(ok):
                return state, caller, step
            kept = self._set_aside(step)
            log.warning("checkpoint %d is damaged (%s); moved to %s, trying the one before it",
                        step, reason, kept)
            lost.append(f"checkpoint {step} ({reason}) moved to {kept}")
        damaged = self.damaged()
        if damaged:
            raise DamagedCheckpoints(
                f"no intact checkpoint in {self._manager.directory}: "
                + "".join(f"{line}; " for line in lost)
                + f"set aside as damaged: {', '.join(damaged)}")
        return None

    def damaged(self) -> list[str]:
        """The checkpoints set aside as damaged (`damaged-<step>` directories), by step."""
        names = [n for n in os.listdir(self._manager.directory) if n.startswith("damaged-")]
        return sorted(names, key=lambda n: [int(p) for p in n[8:].split(".") if p.isdigit()])

    def _set_aside(self, step: int) -> str:
        directory = os.path.join(str(self._manager.directory), str(step))
        target = os.path.join(str(self._manager.directory), f"damaged-{step}")
        suffix = 1
        while os.path.exists(target):
            target = os.path.join(str(self._manager.directory), f"damaged-{step}.{suffix}")
            suffix += 1
        if jax.process_index() == 0:
            os.rename(directory, target)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
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
        """Blocks until every started save is on disk; raises an OSError naming the checkpoint
        when its save failed."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:
            raise self._lost(e) from e
        self._pending = None

    def _lost(self, error: BaseException) -> BaseException:
        step, self._pending, self._failed = self._pending, None, True
        return _write_error(step, error)

    def close(self) -> None:
        """Waits for the saves under way and stops the background writer (after a failed save,
        without raising its error again)."""
        try:
            self._manager.close()
        except Exception:
            if not self._failed:
                raise
