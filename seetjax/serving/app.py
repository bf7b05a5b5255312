"""The OpenAI-compatible HTTP server: a FastAPI app over one `Engine`.

    app = create_app(engine, ServerConfig(model_name="seetjax-tiny"))
    uvicorn.run(app, host="127.0.0.1", port=8000)      # or launch/serve.py

Routes (one router per resource, `seetjax/serving/routes/`): GET /v1/models, GET
/v1/models/{id}, POST /v1/chat/completions, POST /v1/completions, GET /health, GET /metrics.
The engine's decode thread starts and stops with the app (its lifespan).
"""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from seetjax.serving.deps import Server, ServerConfig
from seetjax.serving.engine import Engine
from seetjax.serving.errors import APIError, error_body, install_error_handlers
from seetjax.serving.routes import chat, completions, health, metrics, models


class ApiKeyAuth:
    """Answers 401 to a /v1 request without `Authorization: Bearer <key>` before anything else
    (body size, content type, parsing): a client without the key learns nothing of what its
    body would have got."""

    def __init__(self, app: ASGIApp, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] == "http" and (path == "/v1" or path.startswith("/v1/"))
                and not self._authorized(scope)):
            error = APIError(401, "Incorrect or missing API key: send `Authorization: Bearer "
                             "<key>`.", code="invalid_api_key")
            return await error.response()(scope, receive, send)
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key)


class BodySizeLimit:
    """Answers 413 to a request body over `limit` bytes (by its Content-Length, or by counting a
    chunked body) before any of it reaches the app."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._too_large(send)
        body, more = [], True
        size = 0
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break  # a disconnect: let the app see it
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await self._too_large(send)
            body.append(chunk)
            more = message.get("more_body", False)
        replay: list[Message] = [{"type": "http.request", "body": b"".join(body),
                                  "more_body": False}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _too_large(self, send: Send) -> None:
        payload = json.dumps(error_body(f"The request body is over the limit of {self.limit} "
                                        "bytes.", code="request_too_large")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


def create_app(engine: Engine, config: ServerConfig) -> FastAPI:
    """The app; starting it (uvicorn) starts the engine's decode thread, stopping it stops it."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # An engine already running belongs to someone else (another app, a rollout): the app
        # then neither starts nor stops it.
        owned = not engine.running
        engine.start()
        try:
            yield
        finally:
            if owned:
                engine.stop()

    app = FastAPI(title="seetjax", version="0.1.0", lifespan=lifespan)
    app.state.server = Server(engine, config)
    install_error_handlers(app)
    app.include_router(models.router)
    app.include_router(chat.router)
    app.include_router(completions.router)
    app.include_router(metrics.router)
    app.include_router(health.router)
    app.add_middleware(BodySizeLimit, limit=config.max_request_bytes)
    if config.api_key:
        app.add_middleware(ApiKeyAuth, key=config.api_key)  # added last: runs first
    return app
