"""Response headers every answer carries, and HEAD served wherever GET is.

Owns the security headers (no MIME sniffing, no framing, no referrer, and no caching of `/v1`
answers, which hold per-caller data) and HEAD: the request runs as GET and its body is dropped,
so HEAD answers exactly what GET would, headers included. It must not change a body.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}
PRIVATE_PREFIX = "/v1/"


class ResponseHeaders:
    """Pure ASGI middleware, outermost, so that every answer (errors included) has them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_head = scope["method"] == "HEAD"
        if is_head:
            scope = {**scope, "method": "GET"}
        private = scope["path"].startswith(PRIVATE_PREFIX) or scope["path"] == "/v1"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                if private:
                    headers["Cache-Control"] = "no-store"
            elif message["type"] == "http.response.body" and is_head:
                message = {**message, "body": b""}
            await send(message)

        await self.app(scope, receive, send_with_headers)
