"""JAX's persistent compilation cache: programs land in the cache directory and are read back."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = """
import jax, jax.numpy as jnp
from seetjax.runtime.cache import enable_compilation_cache
path = enable_compilation_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # the toy compiles fast
print(path, float(jax.jit(lambda x: jnp.sin(x) @ x.T)(jnp.ones((64, 64))).sum()))
"""


def _run(cache: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}  # conftest's cache
    env.update(SEETJAX_JAX_CACHE=cache, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_compiled_programs_are_cached_and_reused(tmp_path):
    cache = tmp_path / "jax"
    first = _run(str(cache))
    entries = sorted(p.name for p in cache.iterdir())
    assert entries and first.startswith(str(cache))
    assert _run(str(cache)).split()[1] == first.split()[1]  # same result, read from the cache
    assert sorted(p.name for p in cache.iterdir()) == entries  # no new entry


def test_an_empty_setting_leaves_the_cache_off(tmp_path):
    assert _run("").split()[0] == "."
