"""Loss and gradients of one batch on 1 device and on 8 simulated CPU devices in data, fsdp,
tensor and mixed layouts; prints one JSON line of the largest differences."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from learner_testlib import PARITY_CONFIG, flat_arrays, parity_batch, tiny_model  # noqa: E402

from seetjax.learner import create_learner, learner_config  # noqa: E402
from seetjax.runtime.sharding import make_mesh  # noqa: E402

LAYOUTS = {"data=8": (8, 1, 1), "fsdp=8": (1, 8, 1), "tensor=8": (1, 1, 8), "2x2x2": (2, 2, 2)}


def main() -> None:
    assert len(jax.devices()) == 8
    model = tiny_model(num_layers=1)
    config = learner_config(PARITY_CONFIG)
    batch = parity_batch()
    learner, state = create_learner(model, config, mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    grads, metrics = learner.gradients(state, batch)
    reference, reference_loss = flat_arrays(grads), float(metrics["loss"])
    report = {}
    for name, sizes in LAYOUTS.items():
        learner, state = create_learner(model, config, mesh=make_mesh(*sizes))
        grads, metrics = learner.gradients(state, batch)
        got = flat_arrays(grads)
        report[name] = {
            "loss": abs(float(metrics["loss"]) - reference_loss),
            "grad": max(float(np.max(np.abs(got[k] - reference[k]))) for k in reference),
            "sharded_params": sum(not leaf.sharding.is_fully_replicated
                                  for leaf in jax.tree.leaves(state.params)),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
