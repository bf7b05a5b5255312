"""One of two JAX processes on localhost (CPU, gloo collectives, 2 devices each): each feeds only
its own half of the batch; process 0 writes the loss and gathered gradients to --out."""

import argparse
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from learner_testlib import PARITY_CONFIG, flat_arrays, parity_batch, tiny_model  # noqa: E402

from seetjax.learner import create_learner, learner_config  # noqa: E402
from seetjax.runtime.sharding import make_mesh  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{args.port}", num_processes=2, process_id=args.process)
    assert jax.device_count() == 4 and jax.local_device_count() == 2
    # data=2 across the processes, fsdp=2 within each: parameters sharded, rows split 4 ways
    learner, state = create_learner(tiny_model(num_layers=1), learner_config(PARITY_CONFIG),
                                    mesh=make_mesh(2, 2, 1))
    half = jax.tree.map(lambda x: x[8 * args.process: 8 * (args.process + 1)],
                        parity_batch())
    grads, metrics = learner.gradients(state, half)
    grads = multihost_utils.process_allgather(grads, tiled=True)
    state, step_metrics = learner.step(state, half)
    if args.process == 0:
        np.savez(args.out, loss=float(metrics["loss"]), step_loss=float(step_metrics["loss"]),
                 step=int(state.step), **flat_arrays(grads))


if __name__ == "__main__":
    main()
