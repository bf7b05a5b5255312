"""SEET on Qwen2.5-1.5B-Instruct: configs/qwen2_5_7b_seet.py's EnvTuning-like settings, sized
for one 80 GB GPU.

    python launch/train.py --config=configs/qwen2_5_1_5b_seet.py \
        --config.model.path=/models/Qwen2.5-1.5B-Instruct --workdir=runs/qwen1p5b
"""

from pathlib import Path

from seetjax.config.sections import load_config_file


def get_config():
    return load_config_file(Path(__file__).with_name("qwen2_5_7b_seet.py"), "1.5b")
