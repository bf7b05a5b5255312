"""Small constructed examples and the embedded tokenizer for the data tests."""

import numpy as np
import pytest

from seetjax.data.dialogs import TASK_TYPES
from seetjax.data.formatter import Example


def make_examples(n: int, seed: int = 0, min_len: int = 6, max_len: int = 40,
                  task_types=TASK_TYPES, prefix: str = "e") -> list[Example]:
    """n examples with random tokens (ids 1..99), the second half of each trained, task types in
    turn from `task_types`."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        mask = np.zeros(length, np.int32)
        mask[length // 2:] = 1
        examples.append(Example(f"{prefix}{i}", rng.integers(1, 100, length).astype(np.int32), mask,
                                task_types[i % len(task_types)], 0.5))
    return examples


@pytest.fixture(scope="session")
def tokenizer(embedded_dir):
    from seetjax.models.tokenizer import Tokenizer
    return Tokenizer.from_pretrained(embedded_dir)
