"""Damaged safetensors files fail with the file named and what is missing."""

import numpy as np
import pytest
import safetensors.numpy

from seetjax.models.safetensors_io import SafetensorsReader


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"a": np.ones((256, 256), np.float32),
                                 "b": np.zeros(3, np.int32)}, path)
    return path


def test_intact_file_reads(weights):
    reader = SafetensorsReader(weights.parent)
    np.testing.assert_array_equal(reader["a"], np.ones((256, 256), np.float32))


@pytest.mark.parametrize("keep,message", [
    (-1000, "1000 bytes short"),  # a copy cut off in the tensor data
    (20, "truncated: its header needs"),  # cut off in the header
    (5, "too short for a safetensors file"),
])
def test_truncated_file_says_which_and_by_how_much(weights, keep, message):
    data = weights.read_bytes()
    weights.write_bytes(data[:keep])
    with pytest.raises(ValueError, match=message) as error:
        SafetensorsReader(weights.parent)
    assert str(weights) in str(error.value)


def test_not_a_safetensors_file(weights):
    weights.write_bytes((16).to_bytes(8, "little") + b"\xff" * 16)
    with pytest.raises(ValueError, match="not a safetensors file"):
        SafetensorsReader(weights)
