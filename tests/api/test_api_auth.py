"""Token file and TokenReview authentication, and what each role may read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

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
    principal = await authenticator.authenticate("a-long-enough-token-1", source="t")
    assert principal == auth.Principal(
        user="ana", tenants=frozenset({"team-a"}), roles=frozenset({auth.Role.VIEWER})
    )
    assert await authenticator.authenticate("a-long-enough-token-2", source="t") is None


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
