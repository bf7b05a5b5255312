"""Baseline: DPO from rollouts on the tiny setting. Each step samples G episodes per task; in
each group whose rewards differ, the best episode is chosen over the worst (seetjax.rollout.
preferences), and the update is a DPO step against the warm-up model as reference.

    python launch/train.py --config=configs/dpo.py --workdir=runs/dpo
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("tiny.py"))
    config.seet.enabled = False
    config.learner.algorithm = "dpo"
    config.learner.counterfactual_weight = 0.0
    del config.learner["loss"]
    config.learner.loss = {"beta": 0.1}
    return config
