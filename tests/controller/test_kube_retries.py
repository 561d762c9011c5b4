"""Which resource and reason an expected race is counted under, and that labels stay bounded."""

from __future__ import annotations

import pytest

from gangq.queue import metrics
from gangq.queue.kube import retry
from gangq.queue.kube.client import Cause, KubeError, resource_of


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/ml/pods/train-0", "pods"),
        ("/api/v1/namespaces/ml/pods/train-0/status?x=1", "pods"),
        ("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/train-0/status", "resourceclaims"),
        ("/apis/gangq.dev/v1alpha1/namespaces/ml/trainingjobs", "trainingjobs"),
        ("/api/v1/nodes/gpu-0", "nodes"),
        ("/api/v1/namespaces/ml", "namespaces"),
        ("/apis/resource.k8s.io/v1/resourceslices", "resourceslices"),
        ("/version", ""),
    ],
)
def test_the_resource_a_request_path_names(path: str, resource: str) -> None:
    assert resource_of(path) == resource


def test_races_are_counted_by_resource_and_reason_in_the_controllers_registry() -> None:
    registry, other = metrics.create_metrics(), metrics.create_metrics()
    errors = [
        KubeError(409, "conflict", resource="resourceclaims"),
        KubeError(409, "conflict", resource="resourceclaims"),
        KubeError(429, "slow down", resource="pods"),
        KubeError(503, "unavailable", resource="pods"),
        KubeError(0, "connection reset", resource="events"),
        KubeError(409, "conflict", resource="secrets"),
    ]
    retry.note_expected(errors[0], what="outside any controller")  # counted nowhere
    with retry.counting_in(registry):
        for error in errors:
            retry.note_expected(error, what="test")

    def count(registry: metrics.Metrics, resource: str, reason: str) -> float | None:
        return registry.registry.get_sample_value(
            "gangq_api_retries_total", {"resource": resource, "reason": reason}
        )

    assert count(registry, "resourceclaims", "conflict") == 2
    assert count(registry, "pods", "throttled") == 1
    assert count(registry, "pods", "server_error") == 1
    assert count(registry, "events", "unreachable") == 1
    assert count(registry, "other", "conflict") == 1  # not a resource gangq uses: bounded
    assert count(other, "resourceclaims", "conflict") is None


async def test_refusals_pause_their_object_and_only_gangqs_own_are_counted() -> None:
    """A 401/403 is never retried at once, like a 400/422; only refusals that are gangq's
    fault count in gangq_api_errors_total: a job's bad template is no controller problem."""
    registry = metrics.create_metrics()
    backoff = retry.ObjectBackoff()
    refusals = {
        "creation of Pod ml/a-0": KubeError(403, "forbidden", resource="pods"),
        "creation of Pod ml/b-0": KubeError(
            422, "invalid", resource="pods", causes=(Cause("spec.containers[0].image", "x"),)
        ),
        "allocation of ml/c-0": KubeError(
            422, "invalid", resource="resourceclaims", causes=(Cause("status.allocation", "x"),)
        ),
    }
    calls: list[str] = []

    async def refuse(what: str) -> None:
        calls.append(what)
        raise refusals[what]

    with retry.counting_in(registry), retry.collecting() as collected:
        for what in refusals:
            with pytest.raises(KubeError):
                await retry.retrying(lambda w=what: refuse(w), what=what, backoff=backoff)
    assert calls == list(refusals)  # each sent once
    assert [r.what for r in collected.found] == list(refusals)
    assert all(backoff.remaining_s(what) > 0 for what in refusals)

    def count(resource: str, code: str) -> float | None:
        return registry.registry.get_sample_value(
            "gangq_api_errors_total", {"resource": resource, "code": code}
        )

    assert count("pods", "403") == 1
    assert count("resourceclaims", "422") == 1
    assert count("pods", "422") is None
