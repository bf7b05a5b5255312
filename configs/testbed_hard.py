"""The main job's testbed in the hard regime of issue 44: tasks where the base starts near zero
on held-out tasks, as EnvTuning's Qwen2.5-7B did on its split (7.00), so that plain GRPO gets
little signal from whole tasks and step-level credit (GiGPO, branching) has room to show.

The same copy-free tier as configs/testbed.py (requests name no value to copy), with two API
classes per task instead of one and two to three user turns instead of one to two. Measured
(2026-11-27, `--config.train.steps=1`, 32 held-out tasks): the base solves 0% of them (31% on
the testbed) and 7.7% of its checked training turns (so turns give GRPO some signal, tasks
none); the copying tier (`data.generated.named_values=True`) gave 1.0% of tasks but only 1.4%
of turns, too little to learn from.

    python launch/train.py --config=configs/testbed_hard.py --workdir=runs/testbed_hard
    python experiments/seet_ablation/ablate_seet.py --config=configs/testbed_hard.py ...
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("testbed.py"))
    config.data.generated.classes = 2
    config.data.generated.min_turns = 2
    config.data.generated.max_turns = 3
    return config
