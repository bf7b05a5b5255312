"""experiments/ablate_seet.py: variant overrides name real config fields; the threshold metric."""

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ablate():
    spec = importlib.util.spec_from_file_location("ablate_seet",
                                                  ROOT / "experiments" / "ablate_seet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(accuracies, replies=2.0):
    rows = [{"step": 0, "eval/train_checked_turn_accuracy": 0.0}]
    rows += [{"step": i + 1, "rollout/replies": replies, "rollout/checked_turn_accuracy": a}
             for i, a in enumerate(accuracies)]
    return rows


def test_steps_to_threshold_uses_the_window_mean(ablate):
    # A single lucky step (0.5) does not count with a window of 2; steps 4-5 average 0.4.
    accuracies = [0.0, 0.5, 0.0, 0.4, 0.4]
    steps, env = ablate.steps_to_threshold(_rows(accuracies), 0.3, 2, 8)
    assert steps == 5 and env == 5 * 2.0 * 8
    steps, env = ablate.steps_to_threshold(_rows(accuracies), 0.3, 1, 8)
    assert steps == 2 and env == 2 * 2.0 * 8
    assert all(math.isnan(x) for x in ablate.steps_to_threshold(_rows([0.1] * 5), 0.3, 2, 8))


@pytest.mark.parametrize("variant", ["grpo", "seet", "seet_no_hints", "seet_no_interception",
                                     "seet_no_anchors", "seet_no_curriculum"])
def test_every_variant_is_a_valid_plan(ablate, variant):
    from seetjax.train_config import build_plan

    config = ablate.base_config(steps=5, per_category=1)
    config.model.path = ""
    for dotted, value in ablate.VARIANTS[variant].items():
        ablate.set_field(config, dotted, value)
    build_plan(config)
