"""Baseline: plain GRPO on the tiny setting (configs/tiny.py) — no SEET: the standard environment,
no hints, retries, interception, anchors or counterfactual loss. Same SFT warm-up and tasks.

    python launch/train.py --config=configs/grpo.py --workdir=runs/grpo
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("tiny.py"))
    config.seet.enabled = False
    config.learner.counterfactual_weight = 0.0
    return config
