"""configs/scale_1_5b.py's loop at Qwen2.5-7B's shape with LoRA adapters (rank 64 on every
projection, seetjax.models.lora), random weights, sized for one 80 GB GPU. Not run yet: no GPU was
lent when it was written (docs/scale.md, "The RL loop at scale").

    python launch/train.py --config=configs/scale_7b_lora.py --workdir=runs/scale_7b

Memory: the frozen base in bf16 (7.6 B parameters, ~15 GB) is also the sampler's weights and the
KL reference (adapters zeroed: nothing is copied); the adapters (~161 M parameters at rank 64)
carry the f32 masters and AdamW state (~2.6 GB); the KV cache of 32 rows x at most 4,096
slots, 28 layers, 4 KV heads x 128, bf16: <= 7.5 GB; activations under full remat in 16 micro-batches of 2
packed rows of 2,560 tokens.
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    config = load_config_file(Path(__file__).with_name("scale_1_5b.py"))
    config.model.preset = "qwen2.5-7b"
    config.data.tasks_per_step = 4  # x 8 samples: 32 rows
    config.learner.lora.rank = 64
    config.learner.lora.alpha = 128.0
    config.learner.optimizer.learning_rate = 1e-5  # adapters take larger steps than full weights
    config.learner.micro_batches = 16
    config.seet.max_pairs = config.learner.micro_batches
    return config
