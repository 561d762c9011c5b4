"""Who is calling and what they may see: bearer tokens, principals and roles (PRODUCT §7).

Owns the two ways a token becomes a `Principal`: a token file for standalone use and Kubernetes
TokenReview in a cluster (groups map to roles), and the permission questions routes ask. It must
not know about routes or the database: routers turn a refusal into an HTTP status.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gangq.api import lru, ratelimit
from gangq.queue.core.errors import GangqError, InvalidInputError


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
    async def authenticate(self, token: str, *, source: str) -> Principal | None:
        """The caller behind `token` sent from address `source`, or None when the token is
        unknown or expired; `RateLimitedError` or `ReviewUnavailableError` when it cannot
        be checked now."""
        ...


class RateLimitedError(GangqError):
    """A source sent more unknown tokens than it may; the caller answers 429."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ReviewUnavailableError(GangqError):
    """The Kubernetes API server could not review a token; the caller answers 503."""


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

    async def authenticate(self, token: str, *, source: str) -> Principal | None:
        return self._principals.get(_digest(token))


@dataclass(frozen=True, slots=True)
class GroupRoles:
    """How Kubernetes groups become gangq roles; `tenant_prefix` + NAME makes a viewer of NAME."""

    cluster_admin: frozenset[str] = frozenset({"system:masters", "gangq:cluster-admins"})
    quota_admin: frozenset[str] = frozenset({"gangq:quota-admins"})
    tenant_prefix: str = "gangq:tenant:"

    def principal(
        self, user: str, groups: list[str], *, tenant_of: TenantOf | None = None
    ) -> Principal:
        """`tenant_of` (namespace -> tenant) makes a service account `system:serviceaccount:NS:X`
        a viewer of NS's tenant, so a pod can read its own tenant's jobs with a gangq token."""
        roles: set[Role] = set()
        tenants = {g[len(self.tenant_prefix) :] for g in groups if g.startswith(self.tenant_prefix)}
        namespace = _service_account_namespace(user)
        tenant = None if tenant_of is None or namespace is None else tenant_of(namespace)
        if tenant is not None:
            tenants.add(tenant)
        if tenants:
            roles.add(Role.VIEWER)
        if self.cluster_admin.intersection(groups):
            roles.add(Role.CLUSTER_ADMIN)
        if self.quota_admin.intersection(groups):
            roles.add(Role.QUOTA_ADMIN)
        return Principal(user=user, tenants=frozenset(tenants), roles=frozenset(roles))


TenantOf = Callable[[str], str | None]
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def _service_account_namespace(user: str) -> str | None:
    namespace, _, name = user.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    return namespace if user.startswith(SERVICE_ACCOUNT_PREFIX) and namespace and name else None


class TokenReviewAuthenticator:
    """In a cluster: the API server says who a token belongs to; answers are kept briefly.

    Only tokens meant for gangq pass: the review asks for `audiences` and a status whose
    `audiences` names none of them is refused (an API server that ignores audiences would
    otherwise accept any pod's service-account token). Answers, refusals included, live in a
    bounded LRU; reviews that miss it are rate limited per source address, so a flood of random
    tokens costs the API server a bounded number of calls.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        audiences: tuple[str, ...],
        group_roles: GroupRoles = GroupRoles(),
        tenant_of: TenantOf | None = None,
        cache_seconds: float = 30.0,
        refusal_seconds: float = 10.0,
        cache_size: int = 10_000,
        reviews_per_second: float = 5.0,
        review_burst: int = 20,
    ) -> None:
        if not audiences:
            raise InvalidInputError("TokenReview needs at least one audience (e.g. gangq)")
        self._api = client.AuthenticationV1Api(api_client)
        self._group_roles = group_roles
        self._tenant_of = tenant_of
        self._audiences = audiences
        self._cache_seconds = cache_seconds
        self._refusal_seconds = refusal_seconds
        # One-tuples, so that a cached refusal (None) differs from a miss.
        self._cache: lru.LruCache[tuple[Principal | None]] = lru.LruCache(cache_size)
        self._limits = ratelimit.RateLimiter(per_second=reviews_per_second, burst=review_burst)
        self.reviews = 0
        """TokenReview calls made, so callers can see what the cache and limits saved."""

    async def authenticate(self, token: str, *, source: str) -> Principal | None:
        key = _digest(token)
        now = time.monotonic()
        cached = self._cache.get(key, now=now)
        if cached is not None:
            return cached[0]
        wait = self._limits.acquire(source, now=now)
        if wait > 0:
            raise RateLimitedError(
                f"too many unknown tokens from {source}; retry in {wait:.1f}s", retry_after=wait
            )
        principal = self._principal(await self._review(token))
        keep_s = self._refusal_seconds if principal is None else self._cache_seconds
        self._cache.put(key, (principal,), until=now + keep_s)
        return principal

    async def _review(self, token: str) -> Any:
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=list(self._audiences))
        )
        self.reviews += 1
        try:
            return await self._api.create_token_review(review)
        except ApiException as error:
            raise ReviewUnavailableError(
                f"the Kubernetes API server refused the token review (HTTP {error.status} "
                f"{error.reason}); retry shortly"
            ) from error
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise ReviewUnavailableError(
                f"the Kubernetes API server did not answer the token review ({error!r}); "
                "retry shortly"
            ) from error

    def _principal(self, answer: Any) -> Principal | None:
        status = answer.status
        if status is None or not status.authenticated or status.user is None:
            return None
        if not set(status.audiences or ()) & set(self._audiences):
            return None
        return self._group_roles.principal(
            status.user.username or "", list(status.user.groups or []), tenant_of=self._tenant_of
        )
