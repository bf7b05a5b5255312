"""Session fixtures of the serving tests: the embedded default taught one tool dialog, one
engine on it (compiled once), and one live uvicorn server on 127.0.0.1 in front of it."""

import pytest

from tests.serving.servinglib import MODEL_NAME, LiveServer, taught_model_dir


@pytest.fixture(scope="session")
def model_dir(embedded_dir):
    return taught_model_dir(embedded_dir)


@pytest.fixture(scope="session")
def tiny_model(model_dir):
    from seetjax.models.hf import load_hf_checkpoint
    return load_hf_checkpoint(model_dir)


@pytest.fixture(scope="session")
def engine(tiny_model, tokenizer):
    """The engine behind the shared server; tests may submit to it directly too. A context of
    4096 tokens (room for BFCL prompts with native tool docs), 4 rows, 8-step chunks."""
    from seetjax.serving.engine import Engine
    engine = Engine(tiny_model, tokenizer, max_batch=4, max_queue=8, chunk_steps=8,
                    max_context=4096)
    with engine:
        yield engine


@pytest.fixture(scope="session")
def server(engine):
    from seetjax.serving.app import create_app
    from seetjax.serving.deps import ServerConfig
    config = ServerConfig(model_name=MODEL_NAME, max_request_bytes=256 << 10,
                          max_tokens_limit=512)
    with LiveServer(create_app(engine, config)) as live:
        yield live


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
