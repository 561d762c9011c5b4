"""The last good answer to each read, served, marked stale, while PostgreSQL is unreachable.

A failover takes PostgreSQL away for seconds to a minute; people looking at the queue then
should see where their job was, said to be stale, not an error page. Owns remembering the JSON
answers of successful `GET /v1/...` requests (per caller: answers are redacted per viewer, so
the key holds a digest of the `Authorization` header) in a bounded LRU, and building the stale
answer: the remembered body with `Age`, `Warning: 110` (RFC 9111's "Response is Stale") and
`X-Gangq-Database: unavailable`. Writes are never answered from here. It must not do I/O.
"""

from __future__ import annotations

import hashlib
import time

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gangq.api import lru

CAPACITY = 512
"""Answers kept; a flood of distinct queries evicts the oldest one at a time."""
LARGEST_BYTES = 1 << 20
"""A larger body (a page of 1,000 jobs is about 600 KB) is not kept."""
KEPT_S = 3600.0
"""How old an answer may be and still be served: an outage longer than this is no failover."""
PREFIX = "/v1/"
NOT_KEPT = ("/v1/live",)
"""Streams: nothing to replay."""


class LastAnswers:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._answers: lru.LruCache[tuple[float, bytes, str]] = lru.LruCache(capacity)

    def remember(self, scope: Scope, body: bytes, content_type: str) -> None:
        now = time.monotonic()
        self._answers.put(_key(scope), (now, body, content_type), until=now + KEPT_S)

    def stale(self, request: Request) -> Response | None:
        """The last good answer to this caller's same read, marked stale; None if none."""
        if request.method not in ("GET", "HEAD") or not _kept(request.scope):
            return None
        now = time.monotonic()
        found = self._answers.get(_key(request.scope), now=now)
        if found is None:
            return None
        at, body, content_type = found
        return Response(
            body,
            status_code=200,
            media_type=content_type,
            headers={
                "Age": str(int(now - at)),
                "Warning": '110 gangq "Response is Stale: the database is unavailable"',
                "X-Gangq-Database": "unavailable",
            },
        )


class RememberAnswers:
    """Pure ASGI middleware, innermost: keeps each successful JSON read's body."""

    def __init__(self, app: ASGIApp, answers: LastAnswers) -> None:
        self.app = app
        self.answers = answers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not _kept(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        content_type: str | None = None
        size = 0

        async def keep(message: Message) -> None:
            nonlocal content_type, size
            if message["type"] == "http.response.start":
                found = Headers(raw=message.get("headers", [])).get("content-type", "")
                ok = message["status"] == 200 and found.startswith("application/json")
                content_type = found if ok else None
            elif message["type"] == "http.response.body" and content_type is not None:
                body = message.get("body", b"")
                size += len(body)
                if size > LARGEST_BYTES:
                    content_type = None
                else:
                    chunks.append(body)
                    if not message.get("more_body", False):
                        self.answers.remember(scope, b"".join(chunks), content_type)
            await send(message)

        await self.app(scope, receive, keep)


def _kept(scope: Scope) -> bool:
    path = str(scope["path"])
    return path.startswith(PREFIX) and not path.startswith(NOT_KEPT)


def _key(scope: Scope) -> str:
    authorization = Headers(scope=scope).get("authorization", "")
    caller = hashlib.sha256(authorization.encode()).hexdigest()
    query = scope.get("query_string", b"").decode("latin-1")
    return f"{caller} {scope['path']}?{query}"
