"""Who is calling and what they may see: bearer tokens, principals and roles (PRODUCT §7).

Owns the two ways a token becomes a `Principal`: a token file for standalone use and Kubernetes
TokenReview in a cluster (groups map to roles), and the permission questions routes ask. It must
not know about routes or the database: routers turn a refusal into an HTTP status.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes_asyncio import client
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gangq.queue.core.errors import InvalidInputError


class Role(enum.StrEnum):
    VIEWER = "viewer"
    QUOTA_ADMIN = "quota-admin"
    CLUSTER_ADMIN = "cluster-admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller; `tenants` matter only for the viewer role."""

    user: str
    tenants: frozenset[str] = frozenset()
    roles: frozenset[Role] = frozenset()

    @property
    def is_admin(self) -> bool:
        """Admins read every tenant: quota admins must see use to set quotas."""
        return bool(self.roles & {Role.QUOTA_ADMIN, Role.CLUSTER_ADMIN})

    def can_read_tenant(self, tenant: str) -> bool:
        return self.is_admin or (Role.VIEWER in self.roles and tenant in self.tenants)

    def can_change_quotas(self) -> bool:
        return self.is_admin

    def readable_tenants(self) -> frozenset[str] | None:
        """The tenants this caller may read, or None for all of them."""
        if self.is_admin:
            return None
        return self.tenants if Role.VIEWER in self.roles else frozenset()


class Authenticator(Protocol):
    async def authenticate(self, token: str) -> Principal | None:
        """The caller behind `token`, or None when the token is unknown or expired."""
        ...


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str = Field(min_length=1)
    tenants: tuple[str, ...] = ()
    roles: tuple[Role, ...] = Field(min_length=1)


class TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: dict[str, TokenEntry]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenFileAuthenticator:
    """Standalone mode: a YAML file `tokens: {TOKEN: {user, tenants, roles}}`, read once."""

    def __init__(self, entries: Mapping[str, TokenEntry]) -> None:
        # Keyed by digest so that lookups do not compare secrets byte by byte.
        self._principals = {
            _digest(token): Principal(
                user=entry.user, tenants=frozenset(entry.tenants), roles=frozenset(entry.roles)
            )
            for token, entry in entries.items()
        }

    @classmethod
    def from_path(cls, path: Path) -> TokenFileAuthenticator:
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as error:
            raise InvalidInputError(f"token file {path}: {error.strerror}") from error
        except yaml.YAMLError as error:
            raise InvalidInputError(f"token file {path} is not valid YAML: {error}") from error
        try:
            parsed = TokenFile.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()
            )
            raise InvalidInputError(f"token file {path}: {problems}") from error
        for token, entry in parsed.tokens.items():
            if len(token) < 16:
                raise InvalidInputError(
                    f"token file {path}: the token of user {entry.user!r} is shorter than "
                    "16 characters"
                )
            if Role.VIEWER in entry.roles and not entry.tenants:
                raise InvalidInputError(
                    f"token file {path}: user {entry.user!r} is a viewer of no tenant; "
                    "list its tenants"
                )
        return cls(parsed.tokens)

    async def authenticate(self, token: str) -> Principal | None:
        return self._principals.get(_digest(token))


@dataclass(frozen=True, slots=True)
class GroupRoles:
    """How Kubernetes groups become gangq roles; `tenant_prefix` + NAME makes a viewer of NAME."""

    cluster_admin: frozenset[str] = frozenset({"system:masters", "gangq:cluster-admins"})
    quota_admin: frozenset[str] = frozenset({"gangq:quota-admins"})
    tenant_prefix: str = "gangq:tenant:"

    def principal(self, user: str, groups: list[str]) -> Principal:
        roles: set[Role] = set()
        tenants = {g[len(self.tenant_prefix) :] for g in groups if g.startswith(self.tenant_prefix)}
        if tenants:
            roles.add(Role.VIEWER)
        if self.cluster_admin.intersection(groups):
            roles.add(Role.CLUSTER_ADMIN)
        if self.quota_admin.intersection(groups):
            roles.add(Role.QUOTA_ADMIN)
        return Principal(user=user, tenants=frozenset(tenants), roles=frozenset(roles))


class TokenReviewAuthenticator:
    """In a cluster: the API server says who a token belongs to; answers are kept briefly."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        group_roles: GroupRoles = GroupRoles(),
        audiences: tuple[str, ...] = (),
        cache_seconds: float = 30.0,
    ) -> None:
        self._api = client.AuthenticationV1Api(api_client)
        self._group_roles = group_roles
        self._audiences = list(audiences) or None
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Principal | None]] = {}

    async def authenticate(self, token: str) -> Principal | None:
        key = _digest(token)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=self._audiences)
        )
        answer: Any = await self._api.create_token_review(review)
        status = answer.status
        principal = None
        if status is not None and status.authenticated and status.user is not None:
            principal = self._group_roles.principal(
                status.user.username or "", list(status.user.groups or [])
            )
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = (now + self._cache_seconds, principal)
        return principal
