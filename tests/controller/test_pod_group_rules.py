"""PodGroup rules as pure functions: the group's name per release, the bind timeout of a
released gang whose group kube-scheduler calls unschedulable, and what the REST API shows."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gangq.queue.kube import lifecycle, objects, podgroups
from tests.controller.test_lifecycle_rules import _context, _gang, _pod

GROUP = "job-abc123-0-1"


def _in_group(replica: int, **changes: Any) -> dict[str, Any]:
    """A released, unbound pod of the gang, in GROUP, as kube-scheduler left it."""
    pod = _pod(replica, phase="Pending", ready=False, **changes)
    pod["spec"]["schedulingGroup"] = {"podGroupName": GROUP}
    pod["status"]["conditions"].append(
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/8 nodes are available: replica {replica} does not fit.",
        }
    )
    return pod


def _group(status: str | None, *, since: str = "2026-01-01T00:00:10Z") -> dict[str, Any]:
    conditions = (
        []
        if status is None
        else [
            {
                "type": podgroups.SCHEDULED,
                "status": status,
                "reason": "Unschedulable" if status == "False" else "Scheduled",
                "message": "pod group is unschedulable" if status == "False" else "",
                "lastTransitionTime": since,
            }
        ]
    )
    return {
        "metadata": {"name": GROUP, "creationTimestamp": "2026-01-01T00:00:01Z"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        "status": {"conditions": conditions},
    }


def _unbound_gang(group: dict[str, Any] | None) -> lifecycle.Gang:
    gang = _gang(pods={0: _in_group(0), 1: _in_group(1)})
    return dataclasses.replace(gang, pod_groups={GROUP: group} if group else {})


UNSCHEDULABLE_SINCE = objects.parse_rfc3339("2026-01-01T00:00:10Z") or 0.0


@pytest.mark.parametrize(
    ("group", "now", "timeout", "action"),
    [
        # kube-scheduler has called the group unschedulable for longer than the bound.
        (_group("False"), UNSCHEDULABLE_SINCE + 61, 60.0, lifecycle.Action.TEARDOWN),
        # Not yet that long.
        (_group("False"), UNSCHEDULABLE_SINCE + 59, 60.0, lifecycle.Action.WAIT),
        # Bound together (the pods are about to run): nothing to tear down.
        (_group("True"), UNSCHEDULABLE_SINCE + 500, 60.0, lifecycle.Action.WAIT),
        # Not tried yet.
        (_group(None), UNSCHEDULABLE_SINCE + 500, 60.0, lifecycle.Action.WAIT),
        # Without PodGroups the bound does not apply (the startup timeout does).
        (None, UNSCHEDULABLE_SINCE + 500, 60.0, lifecycle.Action.WAIT),
        (_group("False"), UNSCHEDULABLE_SINCE + 500, float("inf"), lifecycle.Action.WAIT),
    ],
)
def test_a_released_gang_whose_group_stays_unschedulable_is_torn_down(
    group: dict[str, Any] | None, now: float, timeout: float, action: lifecycle.Action
) -> None:
    context = _context(
        now=now,
        admitted_at_s=UNSCHEDULABLE_SINCE,
        startup_timeout_s=10_000.0,
        bind_timeout_s=timeout,
    )
    verdict = lifecycle.assess(_unbound_gang(group), context)
    assert verdict.action is action
    if action is lifecycle.Action.TEARDOWN:
        assert verdict.ending is lifecycle.Ending.REQUEUE
        assert verdict.cause == "Unschedulable"
        assert [f.replica for f in verdict.failures] == [0, 1]
        assert verdict.reason.startswith(
            "replica 0 on gpu-0: not bound by kube-scheduler within 60 s: "
            "0/8 nodes are available: replica 0 does not fit."
        )


def test_pod_group_names_differ_per_attempt_and_per_release() -> None:
    def name(admission: str, replicas: list[int], gang: str = "u") -> str:
        return objects.pod_group_name("job", gang=gang, admission=admission, replicas=replicas)

    first = name("2026-01-01T00:00:00+00:00", [0, 1, 2, 3])
    assert first.startswith("job-") and first.endswith("-0-3")
    assert first == name("2026-01-01T00:00:00+00:00", [3, 2, 1, 0])
    assert first != name("2026-01-01T00:05:00+00:00", [0, 1, 2, 3])
    assert first != name("2026-01-01T00:00:00+00:00", [0, 1])
    assert first != name("2026-01-01T00:00:00+00:00", [0, 1, 2, 3], gang="v")
    assert name("2026-01-01T00:00:00+00:00", [4, 5]).endswith("-4-5")


def test_a_pod_group_is_a_gang_policy_owned_by_the_job() -> None:
    job = {"metadata": {"name": "job", "namespace": "ns", "uid": "u1"}}
    body = objects.pod_group(job, GROUP, gang="g1", min_count=4)
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    assert body["metadata"]["labels"][objects.GANG_LABEL] == "g1"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
    pod = objects.pod(
        {**job, "spec": {}},
        0,
        spec={
            "template": {"spec": {"containers": [{"name": "c"}]}},
            "replicas": 2,
            "devicesPerReplica": 1,
        },
        node="n",
        gated=True,
        gang="g1",
        admission="a",
        size=2,
        group=GROUP,
    )
    assert objects.pod_group_of(pod) == GROUP


def test_what_the_api_shows_of_a_group() -> None:
    shown = podgroups.shown(_group("False"))
    assert (shown.name, shown.min_count, shown.status, shown.message) == (
        GROUP,
        2,
        "False",
        "pod group is unschedulable",
    )
    assert podgroups.shown(_group(None)).status == "Pending"
