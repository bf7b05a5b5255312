"""OpenAI-style errors: every failure is `{"error": {"message", "type", "param", "code"}}` with
the status a client expects (400 bad input naming the field, 401, 404, 413, 415, 429, 500)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from seetjax.serving.protocol import ROLES

logger = logging.getLogger(__name__)

# pydantic names the branch of a union an error came from ('str', 'list[str]', 'NamedToolChoice',
# "literal['none','auto']"): not a field, so left out of the reported parameter.
_UNION_TAG = re.compile(r"(str|int|float|bool|none|(dict|list|literal|function-\w+)\[.*\]|"
                        r"[A-Z]\w*)\Z")


class APIError(Exception):
    """An error answered as OpenAI does."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code, self.headers = param, code, dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def field_path(loc: Sequence[Any]) -> str | None:
    """pydantic's error location as the request field: ('body', 'messages', 0, 'tool',
    'tool_call_id') -> 'messages[0].tool_call_id'."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    out = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        after_message = i >= 2 and isinstance(parts[i - 1], int) and parts[i - 2] == "messages"
        if (after_message and part in ROLES) or _UNION_TAG.match(part):
            continue  # a discriminator or union-branch tag, not a field
        out += f".{part}" if out else part
    return out or None


def validation_error(exc: RequestValidationError, content_type: str | None) -> APIError:
    """The first problem of a request that did not validate, as a 400 naming its field (every
    unknown field, when there are some); 415 for a body not sent as JSON."""
    errors = exc.errors()
    if not errors:
        return APIError(400, "Invalid request body.")
    if isinstance(exc.body, bytes):
        # FastAPI parses a body as JSON only when its Content-Type says JSON: so does this
        # server, as a web page can send a form or text/plain to a local server without a CORS
        # preflight, and must not reach the model that way.
        sent = f"`{content_type}`" if content_type else "no Content-Type"
        return APIError(415, "The request body must be JSON sent with `Content-Type: "
                        f"application/json`; this one came with {sent}.",
                        code="unsupported_media_type")
    unknown = [_unknown_field(e["loc"]) for e in errors if e.get("type") == "extra_forbidden"]
    if unknown:
        names = ", ".join(f"'{name}'" for name in unknown)
        return APIError(400, f"Unknown parameter{'s' if len(unknown) > 1 else ''}: {names}. "
                        "This server refuses what it does not implement rather than ignore it.",
                        param=unknown[0], code="unknown_parameter")
    first = errors[0]
    kind, loc = first.get("type", ""), tuple(first.get("loc", ()))
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return APIError(400, f"The request body is not valid JSON: {detail}".rstrip(": "),
                        code="invalid_json")
    cause = (first.get("ctx") or {}).get("error")
    param = getattr(cause, "field", None) or field_path(loc)
    if kind == "missing" and len(loc) <= 1:
        return APIError(400, "The request body is empty: a JSON object with `model` and "
                        "`messages` is required.", code="invalid_request")
    if param is None and kind in ("model_attributes_type", "dict_type", "model_type"):
        return APIError(400, "The request body must be a JSON object.", code="invalid_request")
    if kind == "missing":
        return APIError(400, f"Missing required parameter: '{param}'.", param=param,
                        code="missing_required_parameter")
    message = str(cause) if cause is not None else first.get("msg", "invalid value")
    message = message.removeprefix("Value error, ")
    return APIError(400, f"Invalid value for '{param}': {message}", param=param,
                    code="invalid_value")


def _unknown_field(loc: Sequence[Any]) -> str:
    """An unknown field's path: its parent's (`field_path`), then its name (never read as a
    union tag: a field may be called `str`)."""
    parent = field_path(loc[:-1])
    return f"{parent}.{loc[-1]}" if parent else str(loc[-1])


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves the server as OpenAI-style JSON; the server stays up."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc, request.headers.get("content-type")).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: f"Unknown path {request.url.path}",
                   405: f"Method {request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        return JSONResponse(error_body(message, "invalid_request_error"),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s", request.url.path)
        return JSONResponse(error_body(f"Internal server error: {type(exc).__name__}",
                                       "server_error"), status_code=500)
