"""Trains a tool-calling agent: SFT warm-up, SEET stages, evaluation (seetjax.rl.trainer).

    python launch/train.py --config=configs/tiny.py --workdir=runs/tiny
    python launch/train.py --config=configs/tiny.py --config.seet.start_stage=3 --workdir=runs/s3

A workdir resumes where it stopped, from its last intact checkpoint (a damaged one is set aside);
when none is intact the run refuses, naming the damage, unless --start_over. One run at a time
holds a workdir (a second is refused, naming the holder); a full disk stops the run naming its
step. On several hosts start one process per host with
`--multihost` (see launch/slurm and launch/k8s): jax.distributed.initialize() then finds the
cluster by itself (SLURM, Kubernetes), or from SEETJAX_COORDINATOR, SEETJAX_NUM_PROCESSES and
SEETJAX_PROCESS_ID (e.g. several processes on one machine, with CPU collectives over gloo).
"""

import os

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from seetjax.learner.checkpoint import DamagedCheckpoints
from seetjax.rl.memory_plan import MemoryPlanError, check_launch, is_size, parse_bytes
from seetjax.rl.trainer import train
from seetjax.runtime.cache import enable_compilation_cache
from seetjax.runtime.workdir import DiskFull, WorkdirBusy

_CONFIG = config_flags.DEFINE_config_file("config", "configs/tiny.py", "Config file.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/tiny", "Where checkpoints and reports go.")
_MULTIHOST = flags.DEFINE_bool("multihost", False, "Call jax.distributed.initialize() first.")
_START_OVER = flags.DEFINE_bool(
    "start_over", False, "When every checkpoint of --workdir is damaged, train from step 0 "
    "(discarding its metrics) instead of refusing.")
_DEVICE_MEMORY = flags.DEFINE_string(
    "device_memory", "", "Memory per device (e.g. 80GiB) the run's memory plan must fit "
    "(launch/plan.py); default: what the device reports (a GPU's), none on the CPU.")
flags.register_validator("device_memory", lambda v: not v or is_size(v),
                         "--device_memory: a size such as 80GiB or 40GB")
flags.register_validator("workdir", lambda v: bool(v.strip()),
                         "--workdir names no directory (an empty path would write into the "
                         "current one)")


def main(argv):
    del argv
    enable_compilation_cache()
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
    if _MULTIHOST.value:
        if "SEETJAX_COORDINATOR" in os.environ:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(os.environ["SEETJAX_COORDINATOR"],
                                       num_processes=int(os.environ["SEETJAX_NUM_PROCESSES"]),
                                       process_id=int(os.environ["SEETJAX_PROCESS_ID"]))
        else:
            jax.distributed.initialize()
    try:
        # before anything loads or compiles: a run that will not fit its devices is refused
        check_launch(_CONFIG.value, parse_bytes(_DEVICE_MEMORY.value) if _DEVICE_MEMORY.value
                     else None)
        train(_CONFIG.value, _WORKDIR.value, start_over=_START_OVER.value)
    except (DamagedCheckpoints, DiskFull, WorkdirBusy, MemoryPlanError) as e:
        raise SystemExit(f"train.py: {e}") from None  # said in full: no traceback


if __name__ == "__main__":
    app.run(main)
