"""Where seetjax keeps what it builds once per machine: the embedded default model and JAX's
persistent compilation cache, under `$SEETJAX_CACHE` (default `~/.cache/seetjax`).

With the compilation cache on, a program XLA compiled once (the learner's update, the sampler's
prefill and decode loop at each bucket) is read back by every later process with the same shapes
and flags instead of being compiled again: a resumed or repeated run, each test worker and each
launch of `make demo` after the first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
from jax.experimental.compilation_cache import compilation_cache as cc

# Programs that compile faster than this are not worth a disk round trip.
MIN_COMPILE_SECONDS = 0.2


def cache_root() -> Path:
    return Path(os.environ.get("SEETJAX_CACHE", Path.home() / ".cache" / "seetjax"))


def enable_compilation_cache(directory: str | os.PathLike | None = None) -> Path:
    """Turns on JAX's persistent compilation cache in `directory` (default `cache_root()/jax`,
    or `$SEETJAX_JAX_CACHE`; set that to an empty string to leave the cache off). Call before
    the first compilation."""
    directory = directory if directory is not None else os.environ.get(
        "SEETJAX_JAX_CACHE", cache_root() / "jax")
    if not str(directory):
        return Path()
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


@contextlib.contextmanager
def compilation_cache_off() -> Iterator[None]:
    """Compiles inside skip JAX's persistent cache (neither read nor written), for what needs
    XLA to run: its dumps (`xla_dump_to`) are written only by a compilation, and a program the
    cache serves leaves none."""
    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    cc.reset_cache()  # JAX decides once per process whether the cache is used; ask again
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        cc.reset_cache()


def cached_directory(prefix: str, key: Any, build: Callable[[Path], Any],
                     cache_dir: str | os.PathLike | None = None,
                     marker: str = "config.json") -> Path:
    """`cache_dir/<prefix>-<digest of key>`, built by `build(tmp)` on first use and renamed into
    place atomically: concurrent callers (test workers, two launches) never see a half-written
    directory, and a build that fails leaves nothing behind. `key` (JSON) holds everything the
    contents depend on; the directory counts as built when it has `marker`."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    final = root / f"{prefix}-{digest}"
    if (final / marker).exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        build(tmp)
        os.rename(tmp, final)
    except OSError:
        if not (final / marker).exists():  # not a lost race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
