"""The main job in one or two minutes: configs/testbed.py cut down to two RL steps (stages 1 and 2)
and a one-task evaluation per split, starting from the embedded default after a few SFT updates
instead of the cached base (whose first build takes minutes). CI runs it from a bare `make install`
(no test extra) so a missing run-time dependency fails there, not on a user's first `make demo`.

    make smoke    # = python launch/train.py --config=configs/smoke.py --workdir=runs/smoke
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("testbed.py"))
    config.model.path = ""
    config.sft.enabled = True
    config.data.categories = "base"
    config.data.tasks_per_category = 2
    config.data.tasks_per_step = 1
    config.rollout.group_size = 2
    config.sft.run.train.steps = 4
    config.sft.run.train.checkpoint_every = 4
    config.seet.max_pairs = 2
    config.seet.stage1.steps = 1
    config.seet.stage2.steps = 1
    config.seet.stage3.steps = 1
    config.train.steps = 2
    config.train.checkpoint_every = 2
    config.eval.splits = "train,test,bfcl:test"  # the testbed's, one task of each category
    config.eval.per_category = 1
    return config
