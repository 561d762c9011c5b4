"""Which tenants a request may touch: the one place routers turn roles into 403s and filters.

It must not query the database; routers pass the tenant a record belongs to.
"""

from __future__ import annotations

from fastapi import HTTPException, status

from gangq.api import auth


def tenant_filter(principal: auth.Principal, requested: str | None) -> str | frozenset[str] | None:
    """The tenant or tenants a list is restricted to, or None for all (admins asking for all)."""
    readable = principal.readable_tenants()
    if readable is None:
        return requested
    if requested is not None:
        require_tenant(principal, requested)
        return requested
    if not readable:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"user {principal.user!r} may read no tenant"
        )
    return readable


def require_tenant(principal: auth.Principal, tenant: str) -> None:
    if not principal.can_read_tenant(tenant):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"user {principal.user!r} may not read tenant {tenant!r}",
        )
