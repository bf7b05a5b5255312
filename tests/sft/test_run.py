"""The SFT run takes a resolved model directory; naming the embedded models is its callers' part."""

import pytest

from seetjax.sft.run import model_directory


def test_an_sft_run_takes_a_model_directory(tmp_path):
    assert model_directory(str(tmp_path)) == tmp_path
    for name in ("", "embedded", "embedded:base"):
        with pytest.raises(ValueError, match=f"config.model.path={name!r}: .*resolve_model_path"):
            model_directory(name)
