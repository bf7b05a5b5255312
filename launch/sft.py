"""Agent SFT: trains a model on agent dialogs with the SFT data pipeline and the learner.

    python launch/sft.py --config=configs/sft.py --workdir=/tmp/sft [--config.train.steps=50]

Run again with the same workdir to resume from its last intact checkpoint (a damaged one is set
aside; with none intact the run refuses, naming the damage); one run at a time holds a workdir.
Metrics go to
<workdir>/metrics.jsonl and TensorBoard; the final model to <workdir>/model (an HF directory).
"""

from absl import app, flags, logging
from ml_collections import config_flags

from seetjax.defaults.base_model import resolve_model_path
from seetjax.learner.checkpoint import DamagedCheckpoints
from seetjax.runtime.cache import enable_compilation_cache
from seetjax.runtime.workdir import WorkdirBusy
from seetjax.sft import run as sft

_CONFIG = config_flags.DEFINE_config_file("config", "configs/sft.py", "Config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and the final model.",
                               required=True)
flags.register_validator("workdir", lambda v: v is None or bool(v.strip()),
                         "--workdir names no directory (an empty path would write into the "
                         "current one)")


def main(argv):
    del argv
    enable_compilation_cache()
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
    config = _CONFIG.value
    config.model.path = str(resolve_model_path(config.model.path))  # '' = the embedded default
    try:
        sft.run(config, _WORKDIR.value)
    except (DamagedCheckpoints, WorkdirBusy) as e:  # said in full: no traceback
        raise SystemExit(f"sft.py: {e}") from None


if __name__ == "__main__":
    app.run(main)
