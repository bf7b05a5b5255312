"""BFCL multi-turn's task splits.

The four categories share their 200 scenarios by index (entry i of base, miss_func, miss_param and
long_context is the same scenario, varied), so a split assigns indices, the same in every category,
and no test scenario is trained on under another category's name. The indices are ordered by the
SHA-256 of `f"{SPLIT_SALT}:{index}"`: the first 100 are `test`, the next 10 `validation`, the last
90 `train` (`train_full` = train + validation, the 100 per category, 400 in all, that EnvTuning
trains on). The split is fixed by this code, independent of any RNG.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from seetjax.envs.bfcl.data import CATEGORIES, BfclTask, load_tasks
from seetjax.errors import invalid

SPLIT_SALT = "seetjax-bfcl-multi-turn-v1"
SPLITS = ("train", "validation", "test", "train_full", "all")
NUM_SCENARIOS = 200


def split_indices(split: str) -> tuple[int, ...]:
    """The scenario indices (0..199) of a split, in increasing order (see the module docstring)."""
    order = sorted(range(NUM_SCENARIOS),
                   key=lambda i: hashlib.sha256(f"{SPLIT_SALT}:{i}".encode()).hexdigest())
    parts = {"test": order[:100], "validation": order[100:110], "train": order[110:],
             "train_full": order[100:], "all": order}
    if split not in parts:
        raise invalid("split_indices", "split", split, f"one of {SPLITS}")
    return tuple(sorted(parts[split]))


def load_split(split: str, categories: Iterable[str] = CATEGORIES,
               per_category: int | None = None) -> list[BfclTask]:
    """The tasks of `split` in each of `categories`, category by category; with `per_category`,
    only the first that many of each (in scenario order: the same scenarios in every category)."""
    indices = set(split_indices(split))
    return [task for category in categories
            for task in [t for t in load_tasks(category) if t.index in indices][:per_category]]
