import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402
from learner_testlib import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def model():
    """A one-layer tiny model, built once per test module."""
    return tiny_model(num_layers=1)


@pytest.fixture(scope="module")
def value_model():
    """The same with a value head (PPO)."""
    return tiny_model(num_layers=1, value_head=True)
