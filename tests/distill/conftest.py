"""Fixtures of the distillation tests: the serving tests' live seetjax server (a real model behind
the real OpenAI-compatible app) is reused as a local teacher, not rebuilt."""

from tests.serving.conftest import engine, model_dir, server, tiny_model  # noqa: F401
