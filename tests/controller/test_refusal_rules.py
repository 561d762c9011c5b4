"""Whose fault a refusal is: only fields the user wrote make a job invalid (rule 14)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from gangq.queue.kube import blame, resources
from gangq.queue.kube.client import Cause, Kube, KubeError
from gangq.queue.kubesim.emulator import Emulator
from tests.controller import api_refusals
from tests.controller.conftest import SMALL


def invalid(resource: str, *causes: tuple[str, str]) -> KubeError:
    return KubeError(
        422,
        "is invalid",
        resource=resource,
        reason="Invalid",
        causes=tuple(Cause(field, message) for field, message in causes),
    )


@pytest.mark.parametrize(
    ("error", "the_jobs"),
    [
        pytest.param(
            invalid("pods", ("spec.containers[0].image", "Required value")), True, id="image"
        ),
        pytest.param(
            invalid("pods", ("metadata.labels", 'Invalid value: "team/"')), True, id="own-label"
        ),
        pytest.param(
            invalid("pods", ("metadata.labels", 'Invalid value: "gangq.dev/job-name"')),
            False,
            id="gangq-label",
        ),
        pytest.param(
            invalid("pods", ("spec.schedulingGates[0].name", "Forbidden: only deletion")),
            False,
            id="gate",
        ),
        pytest.param(
            invalid("pods", ("spec.containers[0].resources.claims[0].name", "Not found")),
            False,
            id="claim-reference",
        ),
        pytest.param(
            invalid("pods", ("spec.containers[0].env[2].name", 'Invalid value: "GANGQ_REPLICAS"')),
            False,
            id="gangq-env",
        ),
        pytest.param(
            invalid(
                "pods",
                ("spec.containers[0].image", "Required value"),
                ("spec.resourceClaims[0].name", "Required value"),
            ),
            False,
            id="user-and-gangq",
        ),
        pytest.param(
            invalid(
                "resourceclaims",
                ("spec.devices.requests[0].exactly.selectors[0].cel.expression", "too costly"),
            ),
            True,
            id="claim-selector",
        ),
        pytest.param(
            invalid("resourceclaims", ("status.allocation", "Forbidden: ...")),
            False,
            id="allocation",
        ),
        pytest.param(
            invalid("resourceclaims", ("metadata.name", "Invalid value")), False, id="claim-name"
        ),
        pytest.param(invalid("pods", ("<nil>", "not checked")), False, id="no-field"),
        pytest.param(
            KubeError(400, 'Pod in version "v1" cannot be handled as a Pod: bad', resource="pods"),
            True,
            id="undecodable-template",
        ),
        pytest.param(
            KubeError(400, "the server rejected our request", resource="pods"),
            False,
            id="bad-patch",
        ),
        pytest.param(KubeError(403, "forbidden", resource="pods"), False, id="forbidden"),
        pytest.param(KubeError(401, "Unauthorized", resource="pods"), False, id="unauthorized"),
    ],
)
def test_only_fields_the_user_wrote_make_a_refusal_the_jobs(
    error: KubeError, the_jobs: bool
) -> None:
    assert blame.is_the_jobs(error) is the_jobs


async def test_case_11_01_is_gangqs_missing_binding_permission() -> None:
    """The captured 422 replayed by the emulator, read by gangq's client: its cause names
    `status.allocation`, and the reason names the permission to grant."""
    async with (
        Emulator(inventory=SMALL) as cluster,
        client.ApiClient(cluster.configuration()) as api_client,
    ):
        kube = Kube(api_client)
        answer = api_refusals.missing_binding("llm-prod-0")
        cluster.faults.refuse_next(1, answer, verb="patch", resource="resourceclaims")
        with pytest.raises(KubeError) as refused:
            await kube.patch(
                resources.RESOURCE_CLAIMS,
                "default",
                "llm-prod-0",
                {"status": {"allocation": {}}},
                subresource="status",
            )
        await kube.close()
    error = refused.value
    assert (error.status, error.resource, error.reason) == (422, "resourceclaims", "Invalid")
    assert [c.field for c in error.causes] == ["status.allocation"]
    assert not blame.is_the_jobs(error)
    reason = blame.controller_reason("allocation of inference/llm-prod-0", error)
    assert reason.message == (
        "controller: the API server refused gangq's allocation of inference/llm-prod-0: "
        "missing permission patch resourceclaims/binding"
    )


def test_the_controllers_problem_in_a_few_words() -> None:
    forbidden = KubeError(
        403,
        'POST /api/v1/namespaces/ml/pods: pods is forbidden: User "x" cannot create resource '
        '"pods" in API group "" in the namespace "ml"',
        resource="pods",
    )
    assert blame.problem(forbidden) == "missing permission create pods"
    unauthorized = KubeError(401, "Unauthorized", resource="pods")
    assert blame.problem(unauthorized) == "its credentials were not accepted (401 Unauthorized)"
    fields = invalid("pods", ("spec.schedulingGates[0].name", "Forbidden: x"), ("<nil>", "n"))
    assert blame.problem(fields) == "spec.schedulingGates[0].name: Forbidden: x"
