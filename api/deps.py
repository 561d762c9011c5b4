"""FastAPI dependencies as Annotated aliases: the caller, a database session, the metrics.

Owns turning a bearer token into a `Principal` (401 without a valid one, 403 for a role the
caller lacks, 429 or 503 when a token cannot be checked now) and one session per request. It
must not hold state: everything lives on `app.state`, set by the lifespan in `app.py`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import asyncpg  # type: ignore[import-untyped]
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPBearer
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.api import auth
from gangq.queue.core import capacity, model

logger = logging.getLogger(__name__)

_bearer = HTTPBearer(
    auto_error=False, description="A token from the token file or a Kubernetes token"
)
PRINCIPAL_STATE = "gangq_principal"
"""Key of the request state under which the body guard leaves a caller it authenticated."""


def bearer_token(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def authenticate(
    authenticator: auth.Authenticator, authorization: str | None, *, source: str
) -> auth.Principal:
    """The caller behind an Authorization header, or the HTTPException that refuses it."""
    token = bearer_token(authorization)
    if token is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "send a bearer token: Authorization: Bearer TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        principal = await authenticator.authenticate(token, source=source)
    except auth.RateLimitedError as error:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            str(error),
            headers={"Retry-After": str(max(1, round(error.retry_after)))},
        ) from error
    except auth.ReviewUnavailableError as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(error)) from error
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "the bearer token is unknown or expired",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    if not principal.roles:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"user {principal.user!r} has no gangq role (viewer, quota-admin or cluster-admin)",
        )
    return principal


def source_of(scope: Any) -> str:
    """The peer address of a request: what per-source limits count."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def current_principal(
    request: Request,
    # Declared for the OpenAPI document's security scheme; the header is parsed above.
    _: Annotated[Any, Depends(_bearer)],
) -> auth.Principal:
    known = getattr(request.state, PRINCIPAL_STATE, None)
    if isinstance(known, auth.Principal):
        return known
    return await authenticate(
        request.app.state.authenticator,
        request.headers.get("authorization"),
        source=source_of(request.scope),
    )


async def quota_admin(
    principal: Annotated[auth.Principal, Depends(current_principal)],
) -> auth.Principal:
    if not principal.can_change_quotas():
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"user {principal.user!r} may not change quotas: "
            "the quota-admin or cluster-admin role is needed",
        )
    return principal


async def session(request: Request) -> AsyncIterator[AsyncSession]:
    """A session per request. It is closed after the response has started, so a connection
    that died meanwhile (a PostgreSQL restart) must not raise there: the answer is sent, and
    the pool replaces the connection."""
    opened: AsyncSession = request.app.state.session_factory()
    try:
        yield opened
    finally:
        try:
            await opened.close()
        except (SQLAlchemyError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError):
            logger.debug("closing a request's database session failed", exc_info=True)


def synced_inventory(request: Request) -> model.Inventory:
    """The cluster as this process sees it, or 503 until its caches have synced."""
    view: capacity.ClusterView | None = request.app.state.cluster
    inventory = None if view is None else view.inventory()
    if inventory is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "this process has no view of the cluster yet; retry when it has synced",
        )
    return inventory


PrincipalDep = Annotated[auth.Principal, Depends(current_principal)]
AdminDep = Annotated[auth.Principal, Depends(quota_admin)]
SessionDep = Annotated[AsyncSession, Depends(session)]
