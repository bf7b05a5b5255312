"""SEET on Qwen2.5-7B-Instruct with EnvTuning-like settings (Lu et al. 2025): 400 training tasks
(100 per category), 16 samples per task, lr 1e-6, clip 0.2/0.28, k3 KL 0.1 in the loss,
seq-mean-token-mean, temperature 1.0, native tool calls through Qwen's chat template; GPUs.

    python launch/train.py --config=configs/qwen2_5_7b_seet.py \
        --config.model.path=/models/Qwen2.5-7B-Instruct --workdir=runs/qwen7b
"""

import ml_collections

from seetjax.rl.config import default_config


def get_config(size: str = "7b"):
    config = default_config()
    config.model.path = ml_collections.config_dict.placeholder(str)  # required: an HF directory
    config.model.dtype = "bfloat16"
    config.model.compute_dtype = "bfloat16"
    config.model.remat = "full"
    config.data.split = "train_full"  # 100 scenarios x 4 categories = 400 tasks
    config.data.tasks_per_step = 32 if size == "7b" else 64
    config.env.prompt_style = "native"
    config.limits.max_reply_tokens = 512
    config.limits.max_episode_tokens = 12288
    config.rollout.group_size = 16
    config.learner.algorithm = "grpo"
    config.learner.loss = dict(clip_low=0.2, clip_high=0.28, kl_coef=0.1, kl_estimator="k3",
                               aggregation="seq-mean-token-mean")
    config.learner.optimizer.learning_rate = 1e-6
    config.learner.counterfactual_weight = 0.1
    config.learner.micro_batches = 16 if size == "7b" else 8
    config.seet.max_pairs = config.learner.micro_batches  # counterfactual pairs: one per chunk
    config.learner.logprob_chunk = 1024  # LM head in sequence chunks: 152k-token vocabulary
    # FSDP over every device; tensor parallelism is the rules' job for 7B on 80 GB cards.
    config.learner.mesh = dict(data=1, fsdp=-1, tensor=1)
    config.seet.stage1.steps, config.seet.stage2.steps, config.seet.stage3.steps = 20, 20, 100
    config.train.steps = 200
    config.train.eval_every = 20
    config.train.checkpoint_every = 10
    config.eval.per_category = 0
    # Native tool calls: bfcl_eval's official decoding reads the python call format only.
    config.eval.decodings = "lenient"
    return config
