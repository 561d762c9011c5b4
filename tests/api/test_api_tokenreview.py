"""TokenReview against the emulated API server: audiences, bounded caching, limits, outages.

Tokens are issued by the emulator as projected service-account tokens are (bound to
audiences); the API reviews them over HTTP with kubernetes-asyncio, as it does in a cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from api_scenario import bearer
from kubernetes_asyncio import client

from gangq.api import auth
from gangq.api.app import create_app
from gangq.api.settings import ApiSettings, AuthMode
from gangq.queue.kubesim.emulator import Emulator

GANGQ = ("gangq",)


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with Emulator(inventory=None) as emulator:
        yield emulator


@pytest.fixture
async def api_client(cluster: Emulator) -> AsyncIterator[client.ApiClient]:
    async with client.ApiClient(cluster.configuration()) as opened:
        yield opened


def test_the_default_audience_is_gangq() -> None:
    assert ApiSettings().token_review_audiences == GANGQ


async def test_groups_of_a_gangq_token_map_to_roles(
    cluster: Emulator, api_client: client.ApiClient
) -> None:
    reviews = cluster.token_reviews
    trainer = reviews.issue(
        "system:serviceaccount:ml:trainer", groups=("gangq:tenant:ml-train",), audiences=GANGQ
    )
    admin = reviews.issue("root", groups=("system:masters",), audiences=GANGQ)
    quota = reviews.issue(
        "quinn", groups=("gangq:quota-admins", "gangq:tenant:ops"), audiences=GANGQ
    )
    authenticator = auth.TokenReviewAuthenticator(api_client, audiences=GANGQ)
    assert await authenticator.authenticate(trainer, source="a") == auth.Principal(
        user="system:serviceaccount:ml:trainer",
        tenants=frozenset({"ml-train"}),
        roles=frozenset({auth.Role.VIEWER}),
    )
    found = await authenticator.authenticate(admin, source="a")
    assert found is not None and found.roles == {auth.Role.CLUSTER_ADMIN}
    found = await authenticator.authenticate(quota, source="a")
    assert found is not None and found.roles == {auth.Role.QUOTA_ADMIN, auth.Role.VIEWER}
    assert await authenticator.authenticate("stolen-token", source="a") is None


@pytest.mark.parametrize("audience_aware", [True, False], ids=["aware", "unaware-server"])
async def test_a_token_for_the_api_server_alone_is_refused(
    cluster: Emulator, api_client: client.ApiClient, *, audience_aware: bool
) -> None:
    """Any pod's default service-account token: even a server that ignores audiences and
    authenticates it is refused, because its status names no gangq audience."""
    cluster.token_reviews.audience_aware = audience_aware
    pod_token = cluster.token_reviews.issue(
        "system:serviceaccount:team-b:default", groups=("gangq:tenant:team-b",)
    )
    authenticator = auth.TokenReviewAuthenticator(api_client, audiences=GANGQ)
    assert await authenticator.authenticate(pod_token, source="a") is None


async def test_answers_are_kept_in_a_bounded_lru(
    cluster: Emulator, api_client: client.ApiClient
) -> None:
    token = cluster.token_reviews.issue("ana", groups=("gangq:tenant:a",), audiences=GANGQ)
    authenticator = auth.TokenReviewAuthenticator(
        api_client, audiences=GANGQ, cache_size=3, review_burst=100
    )
    assert await authenticator.authenticate(token, source="a") is not None
    for index in range(10):
        # Random tokens fill the cache; the one in use stays the most recently used.
        assert await authenticator.authenticate(f"random-{index}", source="a") is None
        assert await authenticator.authenticate(token, source="a") is not None
    assert authenticator.reviews == 11
    # A refusal is cached too: the same unknown token again costs no review.
    assert await authenticator.authenticate("random-9", source="a") is None
    assert authenticator.reviews == 11
    assert cluster.token_reviews.reviewed == 11


async def test_unknown_tokens_are_rate_limited_per_source(
    cluster: Emulator, api_client: client.ApiClient, database_url: str
) -> None:
    authenticator = auth.TokenReviewAuthenticator(
        api_client, audiences=GANGQ, review_burst=3, reviews_per_second=0.01
    )
    for index in range(3):
        assert await authenticator.authenticate(f"guess-{index}", source="10.0.0.1") is None
    with pytest.raises(auth.RateLimitedError, match=r"too many unknown tokens from 10\.0\.0\.1"):
        await authenticator.authenticate("guess-3", source="10.0.0.1")
    assert await authenticator.authenticate("guess-4", source="10.0.0.2") is None
    app = create_app(
        ApiSettings(database_url=database_url, auth_mode=AuthMode.TOKEN_REVIEW),
        authenticator=authenticator,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 4000))
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as http:
            refused = await http.get("/v1/jobs", headers=bearer("guess-5"))
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert cluster.token_reviews.reviewed == 4


async def test_an_api_server_error_is_503_naming_the_api_server(
    cluster: Emulator, api_client: client.ApiClient, database_url: str
) -> None:
    token = cluster.token_reviews.issue("root", groups=("system:masters",), audiences=GANGQ)
    cluster.faults.fail_next(1, code=500, verb="create", resource="tokenreviews")
    app = create_app(
        ApiSettings(database_url=database_url, auth_mode=AuthMode.TOKEN_REVIEW),
        authenticator=auth.TokenReviewAuthenticator(api_client, audiences=GANGQ),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as http:
            failed = await http.get("/v1/jobs", headers=bearer(token))
            retried = await http.get("/v1/jobs", headers=bearer(token))
    assert failed.status_code == 503
    assert failed.json()["detail"].startswith(
        "the Kubernetes API server refused the token review (HTTP 500"
    )
    assert retried.status_code == 200
    assert cluster.faults.injected == 1


async def test_a_pods_projected_token_reads_its_namespaces_tenant(
    cluster: Emulator, api_client: client.ApiClient
) -> None:
    """A service account's token for gangq makes it a viewer of its namespace's tenant."""
    tenants = {"ml-train": "ml"}
    token = cluster.token_reviews.issue(
        "system:serviceaccount:ml-train:trainer",
        groups=("system:serviceaccounts", "system:serviceaccounts:ml-train"),
        audiences=GANGQ,
    )
    stranger = cluster.token_reviews.issue(
        "system:serviceaccount:elsewhere:default", audiences=GANGQ
    )
    authenticator = auth.TokenReviewAuthenticator(
        api_client, audiences=GANGQ, tenant_of=tenants.get
    )
    assert await authenticator.authenticate(token, source="a") == auth.Principal(
        user="system:serviceaccount:ml-train:trainer",
        tenants=frozenset({"ml"}),
        roles=frozenset({auth.Role.VIEWER}),
    )
    found = await authenticator.authenticate(stranger, source="a")
    assert found is not None and not found.roles
