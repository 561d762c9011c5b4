"""FastAPI dependencies as Annotated aliases: the caller, a database session, the metrics.

Owns turning a bearer token into a `Principal` (401 without a valid one, 403 for a role the
caller lacks) and one session per request. It must not hold state: everything lives on
`app.state`, set by the lifespan in `app.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.api import auth

_bearer = HTTPBearer(
    auto_error=False, description="A token from the token file or a Kubernetes token"
)


async def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> auth.Principal:
    if credentials is None or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "send a bearer token: Authorization: Bearer TOKEN",
            headers={"WWW-Authenticate": "Bearer"},
        )
    authenticator: auth.Authenticator = request.app.state.authenticator
    principal = await authenticator.authenticate(credentials.credentials)
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
    async with request.app.state.session_factory() as opened:
        yield opened


PrincipalDep = Annotated[auth.Principal, Depends(current_principal)]
AdminDep = Annotated[auth.Principal, Depends(quota_admin)]
SessionDep = Annotated[AsyncSession, Depends(session)]
