"""`/v1/stream`: server-sent events telling open pages what changed (`live.py`).

Authenticated like every `/v1` route, by the Authorization header: the pages read it with
`fetch`, since the browser's EventSource cannot send a header and a token must never be in a
URL. A stream ends after STREAM_SECONDS (the page reconnects at once) so that a revoked token
stops being served and a server that stops is not held by its streams. It is left out of the
OpenAPI document: a generated client cannot consume an endless body.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from gangq.api import live
from gangq.api.deps import PrincipalDep

router = APIRouter(prefix="/v1/stream", tags=["live"])

STREAM_SECONDS = 300.0
KEEPALIVE_SECONDS = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""
RETRY_MS = 1000


@router.get("", include_in_schema=False)
async def stream(request: Request, principal: PrincipalDep) -> StreamingResponse:
    """`event: change` with the changed topics as data (`["cluster", "jobs"]`)."""
    broadcaster: live.Broadcaster = request.app.state.live

    async def events() -> AsyncIterator[str]:
        async with broadcaster.subscribe() as subscription:
            yield f"retry: {RETRY_MS}\nevent: ready\ndata: {json.dumps(principal.user)}\n\n"
            ends = time.monotonic() + STREAM_SECONDS
            while (left := ends - time.monotonic()) > 0:
                topics = await subscription.next(within_s=min(KEEPALIVE_SECONDS, left))
                if topics:
                    yield f"event: change\ndata: {json.dumps(sorted(topics))}\n\n"
                else:
                    yield ": keep-alive\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
