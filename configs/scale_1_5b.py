"""The whole RL loop at Qwen2.5-1.5B's shape on one 80 GB GPU, with random weights: SEET rollouts on
generated tasks (configs/testbed.py's environment), counterfactual records, the GRPO update (k3 KL
to a bf16 reference) on f32 masters in bf16 compute, checkpoints and greedy evaluations. Nothing
is loaded: the model is built from the `qwen2.5-1.5b` preset (`model.preset`,
seetjax.rl.start_model), the tokenizer is the embedded one, so replies from random weights run to
the reply budget: the load to measure (docs/scale.md, "The RL loop at scale").

    python launch/train.py --config=configs/scale_1_5b.py --workdir=runs/scale
    python launch/train.py --config=configs/scale_1_5b.py --config.train.steps=2 --workdir=...
    python launch/train.py --config=configs/scale_1_5b.py:tiny --workdir=runs/scale_tiny  # CPU

Sizing for 80 GB: per parameter 4 B master + 8 B AdamW + 2 B sampler copy + 2 B reference, and
4 B of gradients during the update (~31 GB for 1.54 B parameters); the KV cache of 64 rows x at
most 4,096 slots (powers of two past 2,048 + 512), 28 layers, 2 KV heads x 128, bf16: <= 7.5 GB;
activations under full remat in 8 micro-batches of 8 packed rows of 2,560 tokens. `:tiny` is
the same loop at the `tiny-qwen2` shape, f32, two tasks of 2 samples and short replies (full remat
and the KL reference kept), for the CPU (tests/integration/test_scale_config.py runs it).
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config(size: str = "1.5b"):
    if size not in ("1.5b", "tiny"):
        raise ValueError(f"configs/scale_1_5b.py:{size}: the argument is '1.5b' or 'tiny'")
    config = load_config_file(Path(__file__).with_name("testbed.py"))
    config.model.path = ""  # the embedded tokenizer only: the weights are the preset's, random
    config.model.preset = "qwen2.5-1.5b"
    config.model.dtype = config.model.compute_dtype = "bfloat16"
    config.model.remat = "full"
    config.sft.enabled = False

    config.data.tasks_per_step = 8
    config.rollout.group_size = 8  # 64 rows, the batch the sampler figures were measured at
    config.rollout.decode_chunk = 64  # 8 host round trips per 512-token reply, not 32
    config.limits.max_reply_tokens = 512
    config.limits.max_turn_tokens = 1024
    config.limits.max_observation_tokens = 256
    config.limits.max_episode_tokens = 2048

    config.learner.loss = dict(kl_coef=0.1, kl_estimator="k3")  # the reference is held (bf16)
    config.learner.optimizer.learning_rate = 1e-6
    config.learner.micro_batches = 8
    config.learner.logprob_chunk = 1024  # the LM head in sequence chunks: 152k-token vocabulary
    config.seet.max_pairs = config.learner.micro_batches

    # Every SEET stage in four steps, so that every shape bucket is met (compile counts settle).
    config.seet.stage1.steps = config.seet.stage2.steps = config.seet.stage3.steps = 1
    config.train.steps = 4
    config.train.checkpoint_every = 2
    config.train.keep_checkpoints = 1  # ~20 GB each (masters, AdamW, reference)
    config.eval.splits = "test@1"
    config.eval.per_category = 1
    config.eval.decodings = "lenient"
    if size == "tiny":
        _tiny(config)
    return config


def _tiny(config) -> None:
    """The CPU's override set: the same loop at tiny shapes."""
    config.model.preset = "tiny-qwen2"
    config.model.dtype = config.model.compute_dtype = "float32"  # bf16 is slower on CPUs
    # remat "full" and the k3 KL reference stay as the GPU run has them: their update is traced here
    config.data.categories = "base"
    config.data.tasks_per_category = 2
    config.data.tasks_per_step = 2
    config.rollout.group_size = 2
    config.rollout.decode_chunk = 8
    config.limits.max_reply_tokens = 16
    config.limits.max_turn_tokens = 48
    config.limits.max_episode_tokens = 1280  # the longest opening prompt is ~1,100 tokens
    config.learner.micro_batches = 2
    config.learner.logprob_chunk = 0
    config.seet.max_pairs = 2
