"""Request bodies: authenticated before they are read, capped per route, read with a deadline.

FastAPI parses a body before any dependency runs, so a 50 MB JSON body sent without a token
would be read and decoded before the 401. This ASGI middleware runs first: a request that
carries a body is authenticated from its headers, refused at once (413) when its declared size
is over the route's cap, then read in full (413 past the cap, 408 when the client stalls) and
handed on. It must not know what the body means: the routes validate it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, status
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gangq.api import deps

QUOTA_BODY_BYTES = 8 * 1024
"""A tenant's quotas: a few device classes, each a few hundred bytes."""
DEFAULT_BODY_BYTES = 1024
"""Every other route takes no body."""
BODY_IDLE_SECONDS = 10.0
"""Longest pause between two chunks of a body before the request is dropped (408)."""


@dataclass(frozen=True, slots=True)
class BodyLimit:
    method: str
    path: re.Pattern[str]
    max_bytes: int


LIMITS: tuple[BodyLimit, ...] = (
    BodyLimit("PUT", re.compile(r"/v1/tenants/[^/]+"), QUOTA_BODY_BYTES),
)


class BodyGuard:
    """Pure ASGI middleware; `limits` name the routes allowed more than `default_bytes`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: Sequence[BodyLimit] = LIMITS,
        default_bytes: int = DEFAULT_BODY_BYTES,
        idle_seconds: float = BODY_IDLE_SECONDS,
    ) -> None:
        self.app = app
        self.limits = tuple(limits)
        self.default_bytes = default_bytes
        self.idle_seconds = idle_seconds

    def limit_for(self, method: str, path: str) -> int:
        for limit in self.limits:
            if limit.method == method and limit.path.fullmatch(path):
                return limit.max_bytes
        return self.default_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.lower(): value for name, value in scope["headers"]}
        declared = headers.get(b"content-length")
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        if not chunked and declared in (None, b"0"):
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        try:
            if declared is not None and int(declared) > limit:
                raise _too_large(limit)
            if scope["path"].startswith("/v1/"):
                authorization = headers.get(b"authorization", b"").decode("latin-1")
                principal = await deps.authenticate(
                    scope["app"].state.authenticator,
                    authorization or None,
                    source=deps.source_of(scope),
                )
                scope.setdefault("state", {})[deps.PRINCIPAL_STATE] = principal
            body = await self._read(receive, limit)
        except HTTPException as refusal:
            # The rest of the body is never read: the connection closes after the answer.
            response = JSONResponse(
                {"detail": refusal.detail},
                status_code=refusal.status_code,
                headers={**(refusal.headers or {}), "Connection": "close"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=self.idle_seconds)
            except TimeoutError as error:
                raise HTTPException(
                    status.HTTP_408_REQUEST_TIMEOUT,
                    f"the request body stalled for {self.idle_seconds:.0f}s",
                ) from error
            if message["type"] == "http.disconnect":
                raise HTTPException(status.HTTP_400_BAD_REQUEST, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _too_large(limit: int) -> HTTPException:
    return HTTPException(
        status.HTTP_413_CONTENT_TOO_LARGE,
        f"the request body is larger than this route's limit of {limit} bytes",
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, as one message; later calls wait for the disconnect."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: Any = await receive()
        return message  # type: ignore[no-any-return]

    return replay
