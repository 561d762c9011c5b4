"""The recovery pass's decisions as a table (module `recovery`: pure, no cluster, no database)."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.core import model
from gangq.queue.core.device import DeviceId
from gangq.queue.kube import objects, recovery

ADMITTED = "2026-12-07T10:00:00.123456+00:00"
LATER = "2026-12-07T11:00:00+00:00"
UID = "uid-1"


def _job(*, replicas: int = 2, elastic: int | None = None, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tier": "training",
        "replicas": replicas,
        "devicesPerReplica": 1,
        "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
    }
    if elastic is not None:
        spec["elastic"] = {"minReplicas": elastic}
    return {
        "metadata": {"name": "train", "namespace": "ml", "uid": UID},
        "spec": spec,
        "status": status,
    }


def _device(replica: int) -> DeviceId:
    return DeviceId(f"gpu.example.com/node-{replica}/gpu-0")


def _claim(replica: int, *, allocated: bool = True) -> dict[str, Any]:
    placement = model.ReplicaPlacement(
        replica, model.NodeName(f"node-{replica}"), (_device(replica),)
    )
    status = objects.allocation(placement, at="2026-12-07T10:00:01Z") if allocated else {}
    return {"metadata": {"name": f"train-{replica}"}, "status": status}


def _pod(
    replica: int,
    *,
    phase: str = "Running",
    admission: str = ADMITTED,
    gated: bool = False,
    size: int | None = None,
    started: str = "2026-12-07T10:00:05Z",
) -> dict[str, Any]:
    annotations = {objects.ADMISSION: admission}
    if size is not None:
        annotations[objects.SIZE] = str(size)
    return {
        "metadata": {"name": f"train-{replica}", "annotations": annotations},
        "spec": {
            "nodeName": f"node-{replica}",
            "schedulingGates": [{"name": objects.GATE}] if gated else [],
        },
        "status": {"phase": phase, "startTime": started},
    }


def _gang(
    *,
    claims: dict[int, Any],
    pods: dict[int, Any],
    job: dict[str, Any] | None = None,
    uid: str = UID,
) -> recovery.ClusterGang:
    return recovery.ClusterGang(
        uid=uid, job=job if job is not None else _job(), claims=claims, pods=pods
    )


WHOLE = {"claims": {0: _claim(0), 1: _claim(1)}, "pods": {0: _pod(0), 1: _pod(1)}}


def test_a_whole_gang_the_store_does_not_hold_is_adopted_as_its_claims_hold_it() -> None:
    later = _pod(1, started="2026-12-07T10:00:09Z")
    [action] = recovery.decide(
        held=[],
        cluster=[_gang(claims=WHOLE["claims"], pods={0: _pod(0), 1: later})],
        jobs_by_uid={},
    )
    assert isinstance(action, recovery.Adopt)
    assert [(p.replica, p.node, p.devices) for p in action.placement] == [
        (0, "node-0", (_device(0),)),
        (1, "node-1", (_device(1),)),
    ]
    assert action.admitted_at.isoformat() == ADMITTED
    assert action.started_at == objects.parse_rfc3339("2026-12-07T10:00:09Z")


@pytest.mark.parametrize(
    ("claims", "pods", "job", "problem"),
    [
        ({0: _claim(0)}, {0: _pod(0)}, _job(), "1 claims, the job runs 2 to 2 replicas"),
        (
            {0: _claim(0), 1: _claim(1)},
            {0: _pod(0)},
            _job(),
            "pods of replicas [0], claims of [0, 1]",
        ),
        (
            {0: _claim(0), 2: _claim(2)},
            {0: _pod(0), 2: _pod(2)},
            _job(),
            "claims of replicas [0, 2]",
        ),
        (
            WHOLE["claims"],
            {0: _pod(0), 1: _pod(1, admission=LATER)},
            _job(),
            "its pods belong to different attempts",
        ),
        (
            WHOLE["claims"],
            {0: _pod(0), 1: _pod(1, gated=True)},
            _job(),
            "replica 1 was never released",
        ),
        (
            WHOLE["claims"],
            {0: _pod(0), 1: _pod(1, phase="Pending")},
            _job(),
            "replica 1 is Pending",
        ),
        (WHOLE["claims"], {0: _pod(0), 1: _pod(1, phase="Failed")}, _job(), "replica 1 is Failed"),
        (
            {0: _claim(0), 1: _claim(1, allocated=False)},
            WHOLE["pods"],
            _job(),
            "the claim of replica 1 has no allocation",
        ),
        (
            {0: _claim(0), 1: _claim(1)},
            {0: _pod(0, size=3), 1: _pod(1, size=3)},
            _job(replicas=4, elastic=1),
            "replica 0 was told size 3, 2 replicas found",
        ),
        (
            {0: _claim(0)},
            {0: _pod(0)},
            _job(replicas=4, elastic=2),
            "1 claims, the job runs 2 to 4",
        ),
    ],
    ids=[
        "too-few-claims",
        "a-pod-missing",
        "a-gap",
        "two-attempts",
        "gated",
        "pending",
        "failed",
        "unallocated",
        "told-another-size",
        "below-elastic-minimum",
    ],
)
def test_anything_partial_is_torn_down_and_says_why(
    claims: dict[int, Any], pods: dict[int, Any], job: dict[str, Any], problem: str
) -> None:
    [action] = recovery.decide(
        held=[], cluster=[_gang(claims=claims, pods=pods, job=job)], jobs_by_uid={}
    )
    assert isinstance(action, recovery.TearDown)
    assert action.reason.startswith("torn down: partial gang found after database recovery: ")
    assert problem in action.reason


def test_an_elastic_gang_at_a_size_between_its_bounds_is_adopted() -> None:
    claims = {r: _claim(r) for r in range(3)}
    pods = {r: _pod(r, size=3) for r in range(3)}
    [action] = recovery.decide(
        held=[],
        cluster=[_gang(claims=claims, pods=pods, job=_job(replicas=4, elastic=2))],
        jobs_by_uid={},
    )
    assert isinstance(action, recovery.Adopt) and len(action.placement) == 3


def test_what_an_ended_gang_left_is_no_recovery_matter() -> None:
    """Terminated pods stay for their logs; a finished job's leftovers are the sweep's."""
    ended = _gang(claims={}, pods={0: _pod(0, phase="Succeeded"), 1: _pod(1, phase="Failed")})
    shown = _gang(**WHOLE, job=_job(phase="Succeeded"))
    assert recovery.decide(held=[], cluster=[ended, shown], jobs_by_uid={}) == []


def test_a_scale_up_gang_and_a_deleted_job_are_not_adopted() -> None:
    deleting = _job()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    actions = recovery.decide(
        held=[],
        cluster=[_gang(**WHOLE, uid=f"{UID}-scale-2"), _gang(**WHOLE, job=deleting)],
        jobs_by_uid={},
    )
    assert [type(a) for a in actions] == [recovery.TearDown]
    assert "scale-up" in actions[0].reason


@pytest.mark.parametrize(
    ("pods", "shown", "finished", "reason"),
    [
        ({}, None, None, "released after database recovery: no claim of this gang"),
        (
            {0: _pod(0, phase="Succeeded"), 1: _pod(1, phase="Succeeded")},
            None,
            "Succeeded",
            "every pod succeeded",
        ),
        ({0: _pod(0, phase="Succeeded"), 1: _pod(1, phase="Failed")}, None, None, "no claim"),
        ({}, "Failed", "Failed", "the TrainingJob shows Failed"),
        ({0: _pod(0)}, "Running", None, "no claim"),
    ],
    ids=["nothing", "all-succeeded", "one-failed", "job-shows-failed", "pods-without-claims"],
)
def test_a_store_gang_with_no_claim_gives_its_devices_back(
    pods: dict[int, Any], shown: str | None, finished: str | None, reason: str
) -> None:
    store = recovery.StoreGang(UID, "ml/train", ADMITTED)
    cluster = [_gang(claims={}, pods=pods)] if pods else []
    job = _job(**({"phase": shown} if shown else {}))
    [action] = recovery.decide(held=[store], cluster=cluster, jobs_by_uid={UID: job})
    assert isinstance(action, recovery.Release)
    assert (action.finished, reason in action.reason) == (finished, True)


def test_a_store_gang_of_a_deleted_job_is_left_to_its_lifecycle() -> None:
    store = recovery.StoreGang(UID, "ml/train", ADMITTED)
    deleting = _job()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    assert recovery.decide(held=[store], cluster=[], jobs_by_uid={}) == []
    assert recovery.decide(held=[store], cluster=[], jobs_by_uid={UID: deleting}) == []


def test_a_store_gang_whose_claims_run_is_left_to_its_lifecycle() -> None:
    store = recovery.StoreGang(UID, "ml/train", ADMITTED)
    jobs = {UID: _job()}
    assert recovery.decide(held=[store], cluster=[_gang(**WHOLE)], jobs_by_uid=jobs) == []
    partial = _gang(claims=WHOLE["claims"], pods={0: _pod(0)})
    assert recovery.decide(held=[store], cluster=[partial], jobs_by_uid=jobs) == []


def test_a_later_attempt_than_the_stores_is_adopted_in_its_place() -> None:
    store = recovery.StoreGang(UID, "ml/train", LATER)
    actions = recovery.decide(held=[store], cluster=[_gang(**WHOLE)], jobs_by_uid={UID: _job()})
    assert [type(a) for a in actions] == [recovery.Release, recovery.Adopt]
    assert actions[0].finished is None  # type: ignore[union-attr]


def test_what_the_store_does_not_back_is_kept_out_of_the_cycle() -> None:
    """A claim of a gang the store does not hold, and a claim of an earlier attempt of a gang
    that holds other devices now: their devices are placed nowhere, and a queue entry with
    such leftovers (or a live pod) is not admitted until they are gone."""
    claims = {UID: {"c0": _claim(0)}, "other": {"c1": _claim(1)}, "stale": {"c2": _claim(2)}}
    reserved = {UID: frozenset({_device(0)}), "stale": frozenset({_device(5)})}
    found = recovery.lingering(claims, {"pod-only", UID}, reserved)
    assert found.devices == {_device(1), _device(2)}
    assert found.gangs == {"other", "pod-only"}
    everything = {**reserved, "other": frozenset({_device(1)}), "pod-only": frozenset()}
    assert recovery.lingering(
        claims, {"pod-only"}, {**everything, "stale": frozenset({_device(2)})}
    ) == recovery.Lingering(frozenset(), frozenset())


def test_only_a_terms_first_pass_judges_the_stores_gangs() -> None:
    """Later in a term a gang admitted a moment ago has no claim yet: not a lost one."""
    store = recovery.StoreGang(UID, "ml/train", ADMITTED)
    jobs = {UID: _job()}
    assert recovery.decide(held=[store], cluster=[], jobs_by_uid=jobs, first=False) == []
    assert recovery.decide(held=[store], cluster=[], jobs_by_uid=jobs, first=True) != []
