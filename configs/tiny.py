"""The embedded default: the offline tiny Qwen2 model and BFCL tokenizer, on the CPU.

    python launch/sample.py --config=configs/tiny.py --config.sampling.temperature=0.7
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.seed = 0

    # An HF checkpoint directory (config.json + safetensors + tokenizer); '' = the embedded default,
    # built offline on first use and cached under $SEETJAX_CACHE (default ~/.cache/seetjax).
    config.model = ml_collections.ConfigDict()
    config.model.path = ""
    config.model.dtype = "float32"  # parameter dtype
    config.model.compute_dtype = "float32"  # bfloat16 on accelerators; f32 is faster on CPU

    config.sampling = ml_collections.ConfigDict()
    config.sampling.temperature = 1.0
    config.sampling.top_k = 0
    config.sampling.top_p = 1.0
    config.sampling.max_new_tokens = 48

    # The demo prompts: the first user turn of BFCL multi-turn tasks, with their tools.
    config.demo = ml_collections.ConfigDict()
    config.demo.category = "base"
    config.demo.num_tasks = 4
    config.demo.samples_per_task = 2
    return config
