"""How the server holds connections: uvicorn's config as `launch/serve.py` runs it, with a bound
on connections that send no complete request and on the drain at shutdown.

    uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=8000)).run()
"""

from __future__ import annotations

import asyncio
import logging

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from seetjax.errors import invalid

logger = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 30.0


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that has not delivered a complete request
    (headers and body) within `timeout_keep_alive` seconds of opening or of its last response.

    uvicorn itself times out only a keep-alive connection that sends nothing after a response,
    and restarts that clock on every byte: a client that connects and sends nothing, or a few
    bytes and then nothing (half-open, slowloris), held its connection, and a drain at shutdown,
    forever. This clock runs from when the connection starts waiting on its client and is not
    restarted by bytes; it stops while a whole request is being answered."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Arms the deadline while the connection waits on its client; disarms it once a whole
        request is in (or the connection is closing)."""
        cycle = self.cycle
        waiting = cycle is None or cycle.response_complete or cycle.more_body
        if not waiting or self.transport.is_closing():
            self._disarm()
        elif self._deadline is None:
            self._deadline = self.loop.call_later(self.timeout_keep_alive, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            logger.debug("closing %s: no complete request in %ss", self.client,
                         self.timeout_keep_alive)
            self.transport.close()


def uvicorn_config(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 8000,
                   idle_timeout_s: float = IDLE_TIMEOUT_S,
                   drain_timeout_s: float = DRAIN_TIMEOUT_S,
                   log_level: str = "info") -> uvicorn.Config:
    """uvicorn serving `app`: a connection that sends no complete request within
    `idle_timeout_s` (of opening or of its last response) is closed; at shutdown (SIGTERM)
    requests in flight get `drain_timeout_s` to finish, then are cancelled (their rows freed)."""
    for name, value in (("idle_timeout_s", idle_timeout_s), ("drain_timeout_s", drain_timeout_s)):
        if not value > 0:
            raise invalid("uvicorn_config", name, value, "must be > 0")
    return uvicorn.Config(app, host=host, port=port, http=BoundedH11Protocol,
                          timeout_keep_alive=idle_timeout_s,
                          timeout_graceful_shutdown=drain_timeout_s,
                          log_level=log_level, lifespan="on")
