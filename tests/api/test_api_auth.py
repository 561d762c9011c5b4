"""Token file and TokenReview authentication, and what each role may read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import client

from gangq.api import auth
from gangq.queue.core.errors import InvalidInputError

GOOD = {
    "tokens": {"a-long-enough-token-1": {"user": "ana", "tenants": ["team-a"], "roles": ["viewer"]}}
}


def write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


async def test_token_file_maps_tokens_to_principals(tmp_path: Path) -> None:
    authenticator = auth.TokenFileAuthenticator.from_path(write(tmp_path, GOOD))
    principal = await authenticator.authenticate("a-long-enough-token-1")
    assert principal == auth.Principal(
        user="ana", tenants=frozenset({"team-a"}), roles=frozenset({auth.Role.VIEWER})
    )
    assert await authenticator.authenticate("a-long-enough-token-2") is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("tokens: [", "is not valid YAML", id="yaml"),
        pytest.param(
            {"tokens": {"a-long-enough-token-1": {"user": "x", "roles": ["root"]}}},
            "roles.0",
            id="role",
        ),
        pytest.param(
            {"tokens": {"a-long-enough-token-1": {"user": "x", "roles": []}}}, "roles", id="no-role"
        ),
        pytest.param(
            {"tokens": {"short": {"user": "x", "roles": ["cluster-admin"]}}},
            "shorter than 16",
            id="short",
        ),
        pytest.param(
            {"tokens": {"a-long-enough-token-1": {"user": "x", "roles": ["viewer"]}}},
            "viewer of no tenant",
            id="viewer",
        ),
        pytest.param({"users": {}}, "tokens: Field required", id="shape"),
    ],
)
async def test_bad_token_files_say_what_is_wrong(
    tmp_path: Path, content: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        auth.TokenFileAuthenticator.from_path(write(tmp_path, content))


async def test_missing_token_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="No such file"):
        auth.TokenFileAuthenticator.from_path(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("roles", "tenants", "reads_a", "reads_b", "changes_quotas", "readable"),
    [
        ({auth.Role.VIEWER}, {"a"}, True, False, False, frozenset({"a"})),
        ({auth.Role.QUOTA_ADMIN}, set(), True, True, True, None),
        ({auth.Role.CLUSTER_ADMIN}, set(), True, True, True, None),
        (set(), {"a"}, False, False, False, frozenset()),
    ],
    ids=["viewer", "quota-admin", "cluster-admin", "no-role"],
)
def test_permissions_per_role(
    *,
    roles: set[auth.Role],
    tenants: set[str],
    reads_a: bool,
    reads_b: bool,
    changes_quotas: bool,
    readable: frozenset[str] | None,
) -> None:
    principal = auth.Principal(user="u", tenants=frozenset(tenants), roles=frozenset(roles))
    assert principal.can_read_tenant("a") is reads_a
    assert principal.can_read_tenant("b") is reads_b
    assert principal.can_change_quotas() is changes_quotas
    assert principal.readable_tenants() == readable


REVIEWS: dict[str, dict[str, Any]] = {
    "sa-token": {
        "username": "system:serviceaccount:ml:trainer",
        "groups": ["gangq:tenant:ml-train"],
    },
    "admin-token": {"username": "root", "groups": ["system:masters"]},
    "quota-token": {"username": "quinn", "groups": ["gangq:quota-admins", "gangq:tenant:ops"]},
}


@pytest.fixture
async def api_server() -> AsyncIterator[tuple[client.ApiClient, list[dict[str, Any]]]]:
    """An HTTP endpoint answering TokenReviews like kube-apiserver does; records the requests."""
    received: list[dict[str, Any]] = []

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        received.append(body)
        user = REVIEWS.get(body["spec"]["token"])
        status: dict[str, Any] = (
            {"authenticated": True, "user": user} if user else {"authenticated": False}
        )
        return web.json_response({**body, "status": status}, status=201)

    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", review)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    api_client = client.ApiClient(configuration)
    try:
        yield api_client, received
    finally:
        await api_client.close()
        await runner.cleanup()


async def test_token_review_maps_groups_to_roles(
    api_server: tuple[client.ApiClient, list[dict[str, Any]]],
) -> None:
    api_client, received = api_server
    authenticator = auth.TokenReviewAuthenticator(api_client, audiences=("gangq",))
    assert await authenticator.authenticate("sa-token") == auth.Principal(
        user="system:serviceaccount:ml:trainer",
        tenants=frozenset({"ml-train"}),
        roles=frozenset({auth.Role.VIEWER}),
    )
    admin = await authenticator.authenticate("admin-token")
    assert admin is not None and admin.roles == {auth.Role.CLUSTER_ADMIN}
    quota = await authenticator.authenticate("quota-token")
    assert quota is not None and quota.roles == {auth.Role.QUOTA_ADMIN, auth.Role.VIEWER}
    assert await authenticator.authenticate("stolen-token") is None
    assert received[0]["spec"] == {"token": "sa-token", "audiences": ["gangq"]}


async def test_token_review_answers_are_cached(
    api_server: tuple[client.ApiClient, list[dict[str, Any]]],
) -> None:
    api_client, received = api_server
    authenticator = auth.TokenReviewAuthenticator(api_client)
    for _ in range(3):
        assert await authenticator.authenticate("sa-token") is not None
        assert await authenticator.authenticate("stolen-token") is None
    assert len(received) == 2
