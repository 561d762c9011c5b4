"""The API against its own `/openapi.json`: a bounded, seeded schemathesis run over real HTTP.

Every operation gets its schema examples, boundary and invalid values (coverage phase) and a
few generated requests (fuzzing phase); each request is sent with a cluster-admin token and
with the token of a viewer of team-a, to the seeded scenario served by uvicorn. Every response
must be documented (status code, content type, body schema) and none may be a 5xx: the database
is reachable and the cluster view synced here, so not even the documented 503 is acceptable.
Generated names rarely hit a seeded job or tenant, so their detail responses are checked
against the schema apart.

The schema is read from the app before any server runs (it depends on the code only, not on
the database), and a test checks that it is what the app serves at `/openapi.json`.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from api_scenario import CLUSTER_ADMIN, VIEWER_A, bearer
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from gangq.api.app import create_app
from gangq.api.settings import ApiSettings

SETTINGS = {
    "seed": 7,
    "generation": {"max-examples": 10, "database": "none"},
    "phases": {
        "stateful": {"enabled": False},
        # OPTIONS checks the `Allow` header, DELETE stands for every method nothing serves.
        "coverage": {"unexpected-methods": ["OPTIONS", "DELETE"]},
    },
    "operations": [
        {
            # A device class given twice passes the JSON schema (it cannot say "unique by
            # key") and is refused with a documented 400 that names the class.
            "include-name": "PUT /v1/tenants/{tenant}",
            "checks": {
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404"]
                }
            },
        }
    ],
}


def published_schema() -> dict[str, Any]:
    return create_app(ApiSettings(database_url="")).openapi()


schema = schemathesis.openapi.from_dict(
    published_schema(), config=SchemathesisConfig.from_dict(SETTINGS)
)


async def test_the_run_uses_the_schema_the_app_publishes() -> None:
    app = create_app(ApiSettings(database_url=""))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as client:
        served = await client.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == published_schema()


# One seeded server per operation, shared by that operation's requests: a PUT may change the
# quotas a later request reads back, which the schema checks do not mind.
@schema.parametrize()
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_response_is_documented_and_none_is_a_5xx(
    case: schemathesis.Case, server: str
) -> None:
    for token in (CLUSTER_ADMIN, VIEWER_A):
        response = case.call(base_url=server, headers=bearer(token))
        assert response.status_code < 500, response.text
        case.validate_response(response, headers=bearer(token))


@pytest.mark.parametrize(
    ("operation", "path"),
    [
        ("GET /v1/jobs/{namespace}/{name}", "/v1/jobs/team-a/a-small"),
        ("GET /v1/jobs/{namespace}/{name}", "/v1/jobs/team-a/a-big"),
        ("GET /v1/tenants/{tenant}", "/v1/tenants/team-a"),
    ],
)
async def test_seeded_details_match_the_schema(
    api: httpx.AsyncClient, operation: str, path: str
) -> None:
    """a-small is admitted (placement, history), a-big queued (position, reason)."""
    response = await api.get(path, headers=bearer(VIEWER_A))
    assert response.status_code == 200
    found = schema.find_operation_by_label(operation)
    assert found is not None
    found.validate_response(response)
