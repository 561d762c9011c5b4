"""Serving the API away from the control loop: uvicorn in its own thread, on its own loop.

Whatever an HTTP request costs (parsing, TLS-less slow clients, a flood of probes), it is paid
on this thread's event loop, never on the controller's: a scheduling cycle cannot be delayed by
the API. The apps it serves hold their own database pool (made by their lifespan, on this
loop) and read only what the controller publishes thread-safely (`published.py`, the metrics
registry). Slow clients are cut off: headers must arrive within HEADER_SECONDS, an idle
keep-alive connection closes after IDLE_SECONDS, and at most MAX_CONNECTIONS are served at
once. It must not know what the apps do.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from gangq.queue import eventloop
from gangq.queue.core.errors import GangqError, InvalidInputError

HEADER_SECONDS = 10.0
"""Longest a connection may take to send a request's headers (slowloris)."""
IDLE_SECONDS = 5
"""Keep-alive: a connection with no request in flight closes after this."""
MAX_CONNECTIONS = 256
"""Concurrent connections and requests; past it uvicorn answers 503 at once."""
MAX_HEADER_BYTES = 16 * 1024
GRACEFUL_SECONDS = 3
"""On stop, requests still open after this are cut (a page's endless event stream)."""
START_SECONDS = 30.0


class Config(uvicorn.Config):
    """uvicorn's settings plus how long a request's headers may take."""

    def __init__(self, app: ASGIApp, *, header_seconds: float, **options: Any) -> None:
        super().__init__(app, **options)
        self.header_seconds = header_seconds


class _HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol plus a deadline for the headers of each request."""

    _deadline: asyncio.TimerHandle | None = None

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_seconds = config.header_seconds

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._deadline = self.loop.call_later(self._header_seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def server_config(app: ASGIApp, *, header_seconds: float = HEADER_SECONDS) -> Config:
    """uvicorn settings for gangq's ports: h11 with the header deadline, bounded connections."""
    return Config(
        app,
        header_seconds=header_seconds,
        log_level="warning",
        log_config=None,
        lifespan="on",
        http=_HeaderDeadline,
        timeout_keep_alive=IDLE_SECONDS,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        limit_concurrency=MAX_CONNECTIONS,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


class Server(uvicorn.Server):
    """No signal handling of its own: the process stops it through `ApiHost.stop`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True, slots=True)
class Endpoint:
    app: ASGIApp
    host: str
    port: int


def listen(host: str, port: int) -> socket.socket:
    """Bind now, in the caller's thread, so a taken port is a clear error before anything runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {error.strerror}") from error
    return listener


class ApiHost:
    """Every endpoint served by one thread with its own event loop; a context manager."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        name: str = "gangq-api",
        header_seconds: float = HEADER_SECONDS,
    ) -> None:
        self._listeners: list[socket.socket] = []
        try:
            self._listeners.extend(listen(e.host, e.port) for e in endpoints)
        except InvalidInputError:
            for listener in self._listeners:
                listener.close()
            raise
        self._servers = [
            Server(server_config(e.app, header_seconds=header_seconds)) for e in endpoints
        ]
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._error: BaseException | None = None
        self._stopping = False
        self.urls = tuple(_url(listener) for listener in self._listeners)
        """`http://host:port` of each endpoint, in order (port 0 becomes the chosen one)."""

    def _run(self) -> None:
        async def serve_one(server: uvicorn.Server, listener: socket.socket) -> None:
            await server.serve(sockets=[listener])
            if not self._stopping:
                # It gave up (its lifespan failed): the others stop too, the owner is told.
                self._error = self._error or GangqError("an endpoint stopped; see the log")
                for other in self._servers:
                    other.should_exit = True

        async def serve_all() -> None:
            await asyncio.gather(
                *(
                    serve_one(server, listener)
                    for server, listener in zip(self._servers, self._listeners, strict=True)
                )
            )

        try:
            eventloop.run(serve_all())
        except BaseException as error:  # reported to the owner's thread by `check`
            self._error = error

    @property
    def started(self) -> bool:
        return all(server.started for server in self._servers)

    def check(self) -> None:
        """Raise when the serving thread ended on its own (not through `stop`)."""
        if not self._stopping and not self._thread.is_alive() and self._thread.ident is not None:
            raise GangqError(f"the REST API stopped: {self._error!r}") from self._error

    def start(self) -> None:
        """Start serving; returns once every endpoint listens (or raises why it could not)."""
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        try:
            while not self.started:
                self.check()
                if time.monotonic() > deadline:
                    raise GangqError("the REST API did not start in time")
                time.sleep(0.01)
        except BaseException:
            self.stop()
            raise

    async def start_async(self) -> None:
        """`start` for a caller on an event loop: waits without blocking that loop."""
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        try:
            while not self.started:
                self.check()
                if time.monotonic() > deadline:
                    raise GangqError("the REST API did not start in time")
                await asyncio.sleep(0.01)
        except BaseException:
            await self.stop_async()
            raise

    def stop(self) -> None:
        self._stopping = True
        for server in self._servers:
            server.should_exit = True
        if self._thread.ident is not None:
            self._thread.join(timeout=START_SECONDS)
        for listener in self._listeners:
            listener.close()

    async def stop_async(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> ApiHost:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _url(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"
