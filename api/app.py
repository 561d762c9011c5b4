"""The FastAPI application: `create_app(settings)` wires routers, auth, database and metrics.

Owns the lifespan (engine, session factory, the timed database check behind `/readyz`,
authenticator, Kubernetes client when TokenReview is used), the edge middleware (bodies checked
before they are read, security headers, HEAD, the last good reads kept) and the mapping of
errors to 4xx/503 responses with a message: bad input is a 4xx, and only a lost connection to
PostgreSQL counts as the database being down (a read then gets its last good answer, marked
stale, when there is one: `stale.py`). `/metrics` is not here: `scrape.py` serves it on its
own port. It must not hold module-level state: every app built here is independent, so tests
can build many.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config.config_exception import ConfigException
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException

from gangq.api import auth, bodies, headers, live, published, readiness, stale
from gangq.api.routers import capacity as capacity_router
from gangq.api.routers import cluster as cluster_router
from gangq.api.routers import health, jobs, queues, tenants, ui, usage
from gangq.api.routers import live as live_router
from gangq.api.settings import ApiSettings, AuthMode
from gangq.queue import metrics
from gangq.queue.core import capacity
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import database
from gangq.queue.store.errors import ConflictError, StoreError

logger = logging.getLogger(__name__)

DESCRIPTION = """Gang-admission queue for GPU clusters with DRA.

Authenticate with `Authorization: Bearer TOKEN`. Roles: `viewer` of given tenants (their jobs
and quotas only), `quota-admin` (reads everything, changes quotas), `cluster-admin`.
"""


def create_app(
    settings: ApiSettings,
    *,
    authenticator: auth.Authenticator | None = None,
    cluster: capacity.ClusterView | None = None,
    registry: metrics.Metrics | None = None,
) -> FastAPI:
    """An app for `settings`; the controller passes its cluster view and metrics in."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            engine = database.create_engine(settings.database_url)
            stack.push_async_callback(engine.dispose)
            app.state.engine = engine
            app.state.session_factory = database.session_factory(engine)
            app.state.authenticator = authenticator or await _authenticator(
                settings, stack, cluster=cluster
            )
            database_health = readiness.DatabaseHealth()
            await database_health.check(engine, app.state.metrics)
            app.state.database_health = database_health
            app.state.live = live.Broadcaster(cluster, app.state.session_factory)
            stack.push_async_callback(app.state.live.close)
            watch = asyncio.create_task(
                database_health.watch(engine, app.state.metrics), name="gangq-api-database-check"
            )
            stack.push_async_callback(_cancel, watch)
            yield

    app = FastAPI(
        title="gangq",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/openapi.json",
    )
    # A trailing-slash redirect would echo the Host header into Location: answer 404 instead.
    app.router.redirect_slashes = False
    app.state.metrics = registry or metrics.create_metrics()
    app.state.cluster = cluster
    app.state.matcher = DeviceMatcher()
    for router in (
        health.router,
        jobs.router,
        queues.router,
        tenants.router,
        capacity_router.router,
        cluster_router.router,
        usage.router,
        live_router.router,
        ui.router,
    ):
        app.include_router(router)
    _add_error_handlers(app)
    app.state.answers = stale.LastAnswers()
    # Added last, runs first: headers on every answer, then bodies before any parsing; the
    # last good reads are kept innermost, as the routes gave them.
    app.add_middleware(stale.RememberAnswers, answers=app.state.answers)
    app.add_middleware(bodies.BodyGuard)
    app.add_middleware(headers.ResponseHeaders)
    return app


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _authenticator(
    settings: ApiSettings, stack: AsyncExitStack, *, cluster: capacity.ClusterView | None
) -> auth.Authenticator:
    if settings.auth_mode is AuthMode.TOKEN_FILE:
        if settings.token_file is None:
            raise InvalidInputError(
                "GANGQ_TOKEN_FILE is not set: give a token file, or use GANGQ_AUTH_MODE=tokenreview"
            )
        return auth.TokenFileAuthenticator.from_path(settings.token_file)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except ConfigException:
        await config.load_kube_config()
    api_client = client.ApiClient()
    stack.push_async_callback(api_client.close)
    return auth.TokenReviewAuthenticator(
        api_client,
        audiences=settings.token_review_audiences,
        tenant_of=cluster.tenant_of if isinstance(cluster, published.PublishedCluster) else None,
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity: a validation error echoing one would fail to render."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document gives the path. Starlette's own 405 names only those of
    the first route with the path (GET of `/v1/tenants/{tenant}`, not its PUT)."""
    for template, operations in app.openapi()["paths"].items():
        pattern = "/".join(
            "[^/]+" if part.startswith("{") else re.escape(part) for part in template.split("/")
        )
        if re.fullmatch(pattern, path):
            methods = {method.upper() for method in operations}
            return sorted(methods | {"HEAD"} if "GET" in methods else methods)
    return []


def _add_error_handlers(app: FastAPI) -> None:
    async def conflict(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=status.HTTP_409_CONFLICT)

    async def invalid(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=status.HTTP_400_BAD_REQUEST)

    async def unavailable(request: Request, error: Exception) -> Response:
        logger.warning("database error for %s %s: %s", request.method, request.url.path, error)
        detail = "the database could not answer this request; retry shortly"
        if database.is_connection_failure(error):
            metrics.set_database_up(request.app.state.metrics, is_up=False)
            answers: stale.LastAnswers = request.app.state.answers
            answer = answers.stale(request)
            if answer is not None:
                return answer
            detail = "the database is unavailable; retry shortly"
        return JSONResponse({"detail": detail}, status_code=status.HTTP_503_SERVICE_UNAVAILABLE)

    async def unprocessable(request: Request, error: Exception) -> JSONResponse:
        errors = error.errors() if isinstance(error, RequestValidationError) else []
        return JSONResponse(
            {"detail": _finite(jsonable_encoder(errors))},
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )

    async def method_not_allowed(request: Request, error: Exception) -> JSONResponse:
        # Paths outside the OpenAPI document (the docs pages) keep Starlette's header.
        fallback = error.headers if isinstance(error, HTTPException) and error.headers else {}
        documented = _allowed_methods(request.app, request.scope["path"])
        allowed = ", ".join(documented) if documented else fallback.get("Allow", "")
        return JSONResponse(
            {"detail": f"method {request.method} is not allowed here; use {allowed}"},
            status_code=status.HTTP_405_METHOD_NOT_ALLOWED,
            headers={"Allow": allowed},
        )

    app.add_exception_handler(status.HTTP_405_METHOD_NOT_ALLOWED, method_not_allowed)
    app.add_exception_handler(RequestValidationError, unprocessable)
    app.add_exception_handler(ConflictError, conflict)
    app.add_exception_handler(InvalidInputError, invalid)
    app.add_exception_handler(StoreError, unavailable)
    app.add_exception_handler(DBAPIError, unavailable)
    app.add_exception_handler(OSError, unavailable)
