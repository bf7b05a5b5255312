"""Baseline: PPO with GAE and a value head (InstructGPT-style KL in the reward) on the tiny
setting, no SEET.

    python launch/train.py --config=configs/ppo.py --workdir=runs/ppo
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("tiny.py"))
    config.seet.enabled = False
    config.learner.algorithm = "ppo"
    config.learner.counterfactual_weight = 0.0
    config.learner.mini_batches = 2  # PPO epochs over each rollout batch
    config.learner.micro_batches = 1
    del config.learner["loss"]  # PPO's own KL settings
    return config
