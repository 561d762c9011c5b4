"""The metrics port's app: `/metrics` in the Prometheus text format, and nothing else.

It is served on its own port (9090 by default), apart from the REST API: the series name every
tenant, so the NetworkPolicy opens that port to the monitoring namespace only. It must not
serve anything a tenant may not read.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gangq.api import headers
from gangq.queue import metrics


def create_metrics_app(registry: metrics.Metrics) -> Starlette:
    async def scrape(request: Request) -> Response:
        return Response(metrics.exposition(registry), media_type=metrics.CONTENT_TYPE)

    app = Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
    app.add_middleware(headers.ResponseHeaders)
    return app
