"""Numerical checks that hold on every backend: the CPU the suite is written on, and GPUs.

Two rules (issue 42):

- **Exact f32 means f32 matmuls.** JAX's default precision runs an f32 matmul at TF32 on a GPU
  (10-bit mantissa, unit roundoff 2^-11 against f32's 2^-24) and in bf16 passes on a TPU; the
  CPU computes f32 whatever the setting. `exact_f32()` sets "highest" where the backend's default
  is not f32 and changes nothing on the CPU (not even the compilation cache's keys), so the CPU's
  tolerances hold unchanged everywhere. tests/conftest.py applies it to the packages whose tests
  compare f32 math with references (`EXACT_F32_PACKAGES`).
- **A low-precision kernel is judged by a baseline's error, not by a fixed atol.** Two bf16 paths
  may each be ~2 logits off an f32 reference on a random model; what must hold is that the
  candidate is no further from the reference than the baseline (e.g. XLA's own bf16 path on the
  same inputs): `assert_within_baseline_error`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

# Test packages whose tests compare f32 math with references (transformers, numpy, another path).
EXACT_F32_PACKAGES = ("models", "sampling", "learner")


def exact_f32_precision(backend: str) -> str | None:
    """The matmul precision that makes `backend`'s f32 matmuls f32: None (leave as is) on the CPU,
    "highest" elsewhere (GPU default: TF32; TPU default: bf16 passes)."""
    return None if backend == "cpu" else "highest"


@contextlib.contextmanager
def exact_f32(backend: str | None = None) -> Iterator[None]:
    """f32 matmuls at f32 inside the block on `backend` (default: JAX's default backend)."""
    precision = exact_f32_precision(backend or jax.default_backend())
    if precision is None:
        yield
        return
    with jax.default_matmul_precision(precision):
        yield


def rms(x: Any) -> float:
    """Root mean square of an array, in float64."""
    x = np.asarray(x, np.float64)
    return float(np.sqrt(np.mean(np.square(x))))


def assert_within_baseline_error(candidate: Any, baseline: Any, reference: Any,
                                 factor: float = 1.25, eps: float = 1e-3) -> None:
    """For every leaf of three pytrees of one structure: RMS(candidate - reference) <= factor *
    RMS(baseline - reference) + eps * RMS(reference). Raises AssertionError naming each leaf that
    fails, with both errors. `eps` keeps a leaf whose baseline is exact from demanding exactness."""
    paths_and_leaves, tree = jax.tree_util.tree_flatten_with_path(reference)
    cand, base = jax.tree.leaves(candidate), jax.tree.leaves(baseline)
    if not len(cand) == len(base) == len(paths_and_leaves):
        raise ValueError(f"assert_within_baseline_error: {len(cand)} candidate, {len(base)} "
                         f"baseline and {len(paths_and_leaves)} reference leaves ({tree})")
    failures = []
    for (path, ref), c, b in zip(paths_and_leaves, cand, base, strict=True):
        ref, c, b = (np.asarray(x, np.float64) for x in (ref, c, b))
        if not c.shape == b.shape == ref.shape:
            raise ValueError(f"{jax.tree_util.keystr(path)}: shapes {c.shape}, {b.shape}, "
                             f"{ref.shape} differ")
        got, allowed = rms(c - ref), factor * rms(b - ref) + eps * rms(ref)
        if not got <= allowed:  # NaN fails too
            failures.append(f"{jax.tree_util.keystr(path) or 'value'}: RMS error {got:.4g} > "
                            f"{allowed:.4g} (baseline {rms(b - ref):.4g} x {factor} + {eps} x "
                            f"RMS {rms(ref):.4g})")
    if failures:
        raise AssertionError("further from the reference than the baseline:\n  "
                             + "\n  ".join(failures))
