"""Agent SFT of the embedded tiny model on BFCL train dialogs (ground truth replayed for real tool
results), on the CPU. Every switch: docs/configs.md ("SFT configs") and docs/sft_data.md.

    python launch/sft.py --config=configs/sft.py --workdir=/tmp/sft \
        --config.coreset.strategy=hybrid --config.coreset.fraction=0.5

Continual learning over categories, with a rehearsal memory of earlier ones:

    python launch/sft.py --config=configs/sft.py --workdir=/tmp/sft_cl \
        --config.data.stages="base;miss_param;miss_func;long_context" --config.replay.ratio=0.25
"""

import ml_collections

from seetjax.sft.config import default_sft_config


def get_config() -> ml_collections.ConfigDict:
    return default_sft_config()
