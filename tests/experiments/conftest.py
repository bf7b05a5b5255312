"""The experiment scripts are files, not a package: tests load them by path."""

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def load_experiment(path: str) -> ModuleType:
    """experiments/<study>/<script>.py, given as "<study>/<script>.py", as a module named after the
    script (it puts experiments/ on sys.path for `grid`)."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, EXPERIMENTS / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def experiment():
    """`load_experiment`, for the tests' module fixtures."""
    return load_experiment
