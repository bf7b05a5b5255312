"""What the routes share (FastAPI dependencies): the server's config, the `Server` every request
reaches through `ServerDep`. The app (`seetjax.serving.app`) imports the
routes, the routes import this module, and it imports neither."""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated

from fastapi import Depends, Request

from seetjax.errors import invalid, require
from seetjax.serving.chat import ChatFormat
from seetjax.serving.engine import Engine
from seetjax.serving.errors import APIError
from seetjax.serving.token_text import TokenText


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """model_name: the id clients send as `model`; api_key: with it, every /v1 request needs
    `Authorization: Bearer <api_key>` (checked before anything else, `seetjax.serving.app.ApiKeyAuth`);
    max_request_bytes: larger bodies get 413;
    max_tokens_limit: the most completion tokens one choice may ask for (default when a request
    gives none: this, or what is left of the context)."""

    model_name: str
    api_key: str | None = None
    max_request_bytes: int = 4 << 20
    max_tokens_limit: int = 4096

    def __post_init__(self):
        if not self.model_name:
            raise invalid(self, "model_name", self.model_name, "must be non-empty")
        for name in ("max_request_bytes", "max_tokens_limit"):
            require(getattr(self, name) >= 1, self, name, getattr(self, name), "must be >= 1")


class Server:
    """What the routes share: the engine, the chat format and the config."""

    def __init__(self, engine: Engine, config: ServerConfig):
        self.engine, self.config = engine, config
        self.format = ChatFormat(engine.tokenizer)
        self.token_text = TokenText(engine.tokenizer)
        self.created = int(time.time())

    def check_model(self, model: str) -> None:
        if model != self.config.model_name:
            raise APIError(404, f"The model `{model}` does not exist; this server serves "
                           f"`{self.config.model_name}`.", param="model", code="model_not_found")


def get_server(request: Request) -> Server:
    return request.app.state.server


ServerDep = Annotated[Server, Depends(get_server)]
