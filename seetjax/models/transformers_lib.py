"""`transformers`, imported for tokenizers and chat templates only.

seetjax never runs PyTorch models, so transformers' advisory "PyTorch was not found. Models won't
be available..." is noise that a new user reads as an error: advisories are turned off before the
import (`TRANSFORMERS_NO_ADVISORY_WARNINGS`; real warnings and errors still show). Import
transformers through this module: `from seetjax.models.transformers_lib import transformers`.
"""

import os

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import transformers  # noqa: E402

__all__ = ["transformers"]
