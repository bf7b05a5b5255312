"""The embedded default, end to end on 2 CPU cores in under 10 minutes: the offline tiny Qwen2
and BFCL tokenizer, an SFT warm-up on ground-truth dialogs of a BFCL subset, SEET stages 1 -> 4
with GRPO and the counterfactual loss on the same subset, then BFCL evaluation.

    python launch/train.py --config=configs/tiny.py --workdir=runs/tiny
    python launch/train.py --config=configs/tiny.py --config.seet.start_stage=3 --workdir=runs/s3

The figures it produces are those of a 4M-parameter model trained from scratch in minutes: they
show the pipeline learning, not BFCL skill.
"""

from pathlib import Path

from seetjax.config.sections import load_config_file
from seetjax.rl.config import default_config


def get_config():
    config = default_config()
    config.data.tasks_per_category = 8  # 32 training tasks
    config.data.tasks_per_step = 2  # B tasks per RL step, over all processes
    config.rollout.group_size = 4  # G samples per task
    config.env.compact_description_chars = 0  # signatures only: ~500-token prompts
    config.limits.max_reply_tokens = 64
    config.limits.max_turn_tokens = 192
    config.limits.max_observation_tokens = 256
    config.limits.max_episode_tokens = 1280

    # SFT warm-up on the ground-truth dialogs of the same tasks, rendered as the rollouts are.
    config.sft.enabled = True
    config.sft.run = load_config_file(Path(__file__).with_name("sft.py"))
    sft = config.sft.run.data  # linked, so that overriding the RL side changes both
    sft.source = config.data.get_ref("source")
    sft.split = config.data.get_ref("split")
    sft.generated = config.data.generated  # the same section: one task stream
    sft.categories = config.data.get_ref("categories")
    sft.tasks_per_category = config.data.get_ref("tasks_per_category")
    sft.prompt_style = config.env.get_ref("prompt_style")
    sft.compact_description_chars = config.env.get_ref("compact_description_chars")
    sft.max_observation_tokens = config.limits.get_ref("max_observation_tokens")
    sft.max_len = sft.seq_len = 1280  # longer dialogs are cut at a message boundary
    sft.eval_split = ""
    config.sft.run.train.steps = 100
    config.sft.run.train.eval_every = 0
    config.sft.run.train.checkpoint_every = 50

    # GRPO + the SEET counterfactual loss, without KL (the warm-up model is the reference).
    config.learner.counterfactual_weight = 0.5
    config.learner.loss = dict(kl_coef=0.0)
    config.learner.optimizer.learning_rate = 3e-5
    config.learner.micro_batches = 2  # gradient accumulation bounds activation memory

    config.seet.max_pairs = 2
    config.seet.stage1.steps = 2
    config.seet.stage2.steps = 2
    config.seet.stage3.steps = 4

    config.train.steps = 10
    config.train.checkpoint_every = 5
    config.eval.per_category = 8
    return config
