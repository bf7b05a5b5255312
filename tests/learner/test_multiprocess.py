"""Two JAX processes on localhost, each feeding its local shard, match one device."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from learner_testlib import PARITY_CONFIG, flat_arrays, parity_batch, tiny_model

from seetjax.learner import create_learner, learner_config
from seetjax.runtime.sharding import make_mesh

WORKER = Path(__file__).with_name("multiprocess_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_match_one_device(tmp_path):
    port, out = _free_port(), tmp_path / "grads.npz"
    procs = [subprocess.Popen([sys.executable, str(WORKER), "--process", str(i), "--port",
                               str(port), "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for i in range(2)]
    learner, state = create_learner(tiny_model(num_layers=1), learner_config(PARITY_CONFIG),
                                    mesh=make_mesh(1, 1, 1, jax.devices()[:1]))
    grads, metrics = learner.gradients(state, parity_batch())
    expected = flat_arrays(grads)
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    got = np.load(out)
    np.testing.assert_allclose(got["loss"], metrics["loss"], atol=1e-5)
    np.testing.assert_allclose(got["step_loss"], metrics["loss"], atol=1e-5)
    assert int(got["step"]) == 1
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=1e-5, err_msg=name)
