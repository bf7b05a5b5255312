"""Trains the tiny model, checkpointing after every update and resuming from the latest
checkpoint in --workdir if there is one; writes the final parameters to --out.

Each batch is drawn from the state's RNG, which the loop advances after every update, and the
data position is caller state: a resume that lost either would train on other batches.
"""

import argparse
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from learner_testlib import flat_arrays, rl_batch, tiny_model  # noqa: E402

from seetjax.learner import create_learner, learner_config  # noqa: E402
from seetjax.learner.checkpoint import Checkpointer  # noqa: E402
from seetjax.runtime.sharding import make_mesh  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    learner, state = create_learner(tiny_model(num_layers=1), learner_config(
        {"algorithm": "dapo", "micro_batches": 2,
         "optimizer": {"learning_rate": 1e-3, "warmup_steps": 2, "decay_steps": 8}}),
        mesh=make_mesh(1, 2, 1), seed=7)  # fsdp: each device saves and restores its shards
    checkpoints = Checkpointer(os.path.join(args.workdir, "checkpoints"), keep_last=2)
    position = 0
    if checkpoints.latest_step() is not None:
        state, caller = checkpoints.restore(state)
        position = caller["next_batch"]
        print(f"resumed at {position}", flush=True)
    while position < args.steps:
        key, next_key = jax.random.split(state.key())
        batch = rl_batch(seed=int(jax.random.randint(key, (), 0, 2 ** 30)))
        state, _ = learner.step(state, batch)
        state = state.replace(rng=jax.random.key_data(next_key))
        position += 1
        checkpoints.save(position, state, caller_state={"next_batch": position})
        print(f"step {position}", flush=True)
    checkpoints.wait()
    np.savez(args.out, **flat_arrays(state.params))


if __name__ == "__main__":
    main()
