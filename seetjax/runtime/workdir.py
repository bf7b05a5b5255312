"""A run's workdir: named (an empty name would silently be the current directory), held by one
process at a time, and a full disk under it reported in words.

Two runs in one workdir would overwrite each other's checkpoints, metrics and exported model, so a
run takes `WorkdirLock` first: an exclusive `flock` on `<workdir>/run.lock` (`run.p<i>.lock` for
process i of several) that names its holder (pid, host, start time). The kernel drops the flock
when its holder dies, so the lock of a killed run is taken over, with a warning naming it; the file
itself stays (unlinking it would let a third process lock a new file while a second still holds the
old one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

from seetjax.errors import invalid

log = logging.getLogger(__name__)

# The errnos of a write that found no room: the disk, or the user's quota, is full.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class WorkdirBusy(RuntimeError):
    """Another process holds the workdir."""


class DiskFull(OSError):
    """A write of the run failed for want of space."""


def workdir_path(value: str | os.PathLike, flag: str = "workdir") -> Path:
    """`value` as a Path; ValueError naming `flag` when it is empty."""
    if not str(value).strip():
        raise invalid("flags", flag, str(value), "names no directory (an empty path would write "
                         "into the current one); give the run's directory")
    return Path(value)


@contextlib.contextmanager
def full_disk_reported(where: str, workdir: Path, stop: Callable[[], None]) -> Iterator[None]:
    """Turns a full disk met in the block into DiskFull naming `where` (e.g. the run's step),
    after `stop()` (e.g. a checkpointer's background writer, whose own errors would otherwise
    end the output)."""
    try:
        yield
    except OSError as error:
        if error.errno not in DISK_FULL:
            raise
        stop()
        detail = error.strerror + (f": {error.filename}" if error.filename else "")
        raise DiskFull(error.errno, f"the disk is full at {where} ({detail}); free space under "
                       f"{workdir} and run again: it resumes from its last complete "
                       "checkpoint") from error


class WorkdirLock:
    """This process's exclusive hold on `workdir` (made if missing), released by `release()` or
    when the process ends (see the module docstring); WorkdirBusy names the holder."""

    def __init__(self, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        suffix = f".p{jax.process_index()}" if jax.process_count() > 1 else ""
        self.path = workdir / f"run{suffix}.lock"
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _described(self._holder())
            self._file.close()
            raise WorkdirBusy(
                f"{self.path.parent} is in use by another run ({holder}; lock file "
                f"{self.path}): two runs in one workdir would overwrite each other's "
                "checkpoints and metrics; wait for it to end, stop it, or use another "
                "workdir") from None
        left = self._holder()
        if left:
            log.warning("%s: taking over the lock of a run that ended without releasing it (%s)",
                        self.path, _described(left))
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        self._file.flush()

    def _holder(self) -> dict[str, Any]:
        """What the lock file says of its holder ({} when empty: released)."""
        self._file.seek(0)
        text = self._file.read()
        if not text.strip():
            return {}
        try:
            holder = json.loads(text)
        except json.JSONDecodeError:
            return {"unreadable": text[:100]}
        return holder if isinstance(holder, dict) else {"unreadable": text[:100]}

    def release(self) -> None:
        """Empties the lock file and drops the lock (again: nothing)."""
        if self._file.closed:
            return
        self._file.seek(0)
        self._file.truncate()
        self._file.flush()
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()


def _described(holder: dict[str, Any]) -> str:
    if "pid" not in holder:
        return f"holder unknown: {holder or 'empty lock file'}"
    return (f"pid {holder['pid']} on host {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}")
