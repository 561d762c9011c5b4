"""The lifecycle rules as a table: what `assess` decides for a gang in a given state, and what
`scale.plan` does with a job's queue entries. Pure functions, no cluster needed."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.core import model
from gangq.queue.core.device import DeviceId
from gangq.queue.kube import lifecycle, objects, scale, status
from gangq.queue.store import jobs

ADMITTED = "2026-01-01T00:00:00+00:00"
DEVICES = {r: tuple(DeviceId(f"gpu.nvidia.com/gpu-{r}/gpu-{i}") for i in range(2)) for r in (0, 1)}
PLACEMENT = tuple(
    model.ReplicaPlacement(replica=r, node=model.NodeName(f"gpu-{r}"), devices=DEVICES[r])
    for r in (0, 1)
)


def _pod(
    replica: int,
    *,
    gated: bool = False,
    phase: str = "Running",
    ready: bool = True,
    terminated: dict[str, Any] | None = None,
    size: int = 2,
    asked: bool = False,
) -> dict[str, Any]:
    """A pod as gangq builds it for a gang of `size` replicas; `asked` for a checkpoint."""
    spec: dict[str, Any] = {"schedulingGates": [{"name": objects.GATE}]} if gated else {}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if terminated is not None:
        status["containerStatuses"] = [{"name": "work", "state": {"terminated": terminated}}]
    annotations = {objects.SIZE: str(size)}
    if asked:
        annotations[objects.CHECKPOINT_REQUESTED] = "2026-01-01T00:01:30Z"
    meta = {"name": f"job-{replica}", "annotations": annotations}
    return {"metadata": meta, "spec": spec, "status": status}


def _claim(replica: int, devices: tuple[DeviceId, ...] | None = None) -> dict[str, Any]:
    chosen = DEVICES[replica] if devices is None else devices
    results = [dict(zip(("driver", "pool", "device"), d.split("/"), strict=True)) for d in chosen]
    return {
        "metadata": {"name": f"job-{replica}"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def _gang(
    *,
    pods: dict[int, Any] | None = None,
    claims: dict[int, Any] | None = None,
    annotations: dict[str, str] | None = None,
    running: bool = False,
    evicting: bool = False,
    deleted: bool = False,
    shrink_to: int | None = None,
) -> lifecycle.Gang:
    meta: dict[str, Any] = {
        "name": "job",
        "namespace": "ns",
        "uid": "u",
        "annotations": annotations or {},
    }
    if deleted:
        meta["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    return lifecycle.Gang(
        key=model.JobKey("ns/job"),
        uid="u",
        job_uid="u",
        name="job",
        job={"metadata": meta},
        placement=PLACEMENT,
        admitted_at=ADMITTED,
        is_running=running,
        is_evicting=evicting or shrink_to is not None,
        pods=pods if pods is not None else {0: _pod(0), 1: _pod(1)},
        claims=claims if claims is not None else {0: _claim(0), 1: _claim(1)},
        shrink_to=shrink_to,
    )


def _node(name: str, **changes: Any) -> model.Node:
    return model.Node(name=model.NodeName(name), **changes)


NODES = {model.NodeName(f"gpu-{r}"): _node(f"gpu-{r}") for r in (0, 1)}
UNREACHABLE = _node(
    "gpu-1",
    ready=False,
    unready_reason="NodeStatusUnknown: Kubelet stopped posting node status.",
    taints=(
        model.Taint("node.kubernetes.io/unreachable", effect="NoSchedule"),
        model.Taint("node.kubernetes.io/unreachable", effect="NoExecute"),
    ),
)
MAINTENANCE = model.Taint("gpu-maintenance", "true", "NoExecute")


def _context(**changes: Any) -> lifecycle.Context:
    values: dict[str, Any] = {
        "now": 100.0,
        "long_running": False,
        "startup_timeout_s": 600.0,
        "admitted_at_s": 0.0,
        "restarts": 0,
        "max_restarts": 3,
        "nodes": NODES,
    }
    return lifecycle.Context(**{**values, **changes})


def _on(*nodes: model.Node) -> dict[model.NodeName, model.Node]:
    """The scenario's nodes, with these in place of theirs."""
    return {**NODES, **{n.name: n for n in nodes}}


def _deleted(replica: int) -> dict[str, Any]:
    """A pod someone deleted, still terminating."""
    deleted = _pod(replica)
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    return deleted


def _evicted(replica: int, reason: str, message: str) -> dict[str, Any]:
    """A pod a controller marked (DisruptionTarget) and deleted, still terminating."""
    evicted = _deleted(replica)
    evicted["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}
    )
    return evicted


CASES = [
    ("nothing-yet-builds", _gang(pods={}, claims={}), _context(), lifecycle.Action.BUILD, None),
    (
        "gated-builds",
        _gang(pods={0: _pod(0, gated=True), 1: _pod(1, gated=True)}),
        _context(),
        lifecycle.Action.BUILD,
        None,
    ),
    (
        "half-released-finishes-release",
        _gang(pods={0: _pod(0), 1: _pod(1, gated=True)}),
        _context(),
        lifecycle.Action.BUILD,
        None,
    ),
    ("all-ready-runs", _gang(), _context(), lifecycle.Action.MARK_RUNNING, None),
    (
        "not-ready-waits",
        _gang(pods={0: _pod(0, ready=False), 1: _pod(1)}),
        _context(),
        lifecycle.Action.WAIT,
        None,
    ),
    (
        "startup-timeout-requeues",
        _gang(pods={0: _pod(0, ready=False), 1: _pod(1)}),
        _context(now=700.0),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "gated-timeout-requeues",
        _gang(pods={}, claims={}),
        _context(now=700.0),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "all-succeeded",
        _gang(pods={0: _pod(0, phase="Succeeded"), 1: _pod(1, phase="Succeeded")}, running=True),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.SUCCEEDED,
    ),
    (
        "failed-pod-restarts-gang",
        _gang(pods={0: _pod(0, phase="Failed"), 1: _pod(1)}, running=True),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "failed-pod-out-of-restarts",
        _gang(pods={0: _pod(0, phase="Failed"), 1: _pod(1)}, running=True),
        _context(restarts=3),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.FAILED,
    ),
    (
        "long-running-restarts-in-place",
        _gang(pods={0: _pod(0, phase="Failed"), 1: _pod(1)}, running=True),
        _context(long_running=True, restarts=9),
        lifecycle.Action.RESTART_IN_PLACE,
        None,
    ),
    (
        "long-running-never-succeeds",
        _gang(pods={0: _pod(0, phase="Succeeded"), 1: _pod(1, phase="Succeeded")}, running=True),
        _context(long_running=True),
        lifecycle.Action.RESTART_IN_PLACE,
        None,
    ),
    (
        "foreign-allocation",
        _gang(claims={0: _claim(0, DEVICES[1]), 1: _claim(1)}),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "cleared-after-release",
        _gang(claims={0: {"metadata": {}, "status": {}}, 1: _claim(1)}),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "cleared-before-release-rewritten",
        _gang(pods={}, claims={0: {"metadata": {}, "status": {}}}),
        _context(),
        lifecycle.Action.BUILD,
        None,
    ),
    (
        "node-not-ready",
        _gang(running=True),
        _context(nodes=_on(UNREACHABLE)),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "ran-and-every-pod-is-gone",
        _gang(running=True, pods={}),
        _context(nodes=_on(_node("gpu-0", taints=(MAINTENANCE,)))),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "long-running-pod-deleted-restarts-in-place",
        _gang(running=True, pods={0: _deleted(0), 1: _pod(1)}),
        _context(long_running=True),
        lifecycle.Action.RESTART_IN_PLACE,
        None,
    ),
    (
        "long-running-evicted-by-its-node-taint-leaves-the-node",
        _gang(
            running=True,
            pods={0: _evicted(0, lifecycle.TAINT_MANAGER, "Taint manager: ..."), 1: _pod(1)},
        ),
        _context(long_running=True, nodes=_on(_node("gpu-0", taints=(MAINTENANCE,)))),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "long-running-drained-leaves-the-node",
        _gang(
            running=True,
            pods={0: _evicted(0, "EvictionByEvictionAPI", "Eviction API: evicting"), 1: _pod(1)},
        ),
        _context(long_running=True),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "device-no-execute",
        _gang(running=True),
        _context(evicting_devices=frozenset({DEVICES[0][1]})),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "evicting",
        _gang(running=True, evicting=True),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.PREEMPTED,
    ),
    (
        "deleted",
        _gang(deleted=True),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.DELETED,
    ),
    (
        "kept-succeeded-pods-win-over-deleted-claims",
        _gang(pods={0: _pod(0, phase="Succeeded"), 1: _pod(1, phase="Succeeded")}, claims={}),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.SUCCEEDED,
    ),
    (
        "kept-failed-pod-wins-over-deleted-claims",
        _gang(pods={0: _pod(0, phase="Failed"), 1: _pod(1)}, claims={}),
        _context(restarts=3),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.FAILED,
    ),
    (
        "max-runtime-fails-for-good",
        _gang(running=True),
        _context(started_at_s=10.0, max_runtime_s=60.0),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.FAILED,
    ),
    (
        "within-max-runtime-waits",
        _gang(running=True),
        _context(started_at_s=50.0, max_runtime_s=60.0),
        lifecycle.Action.WAIT,
        None,
    ),
    (
        "scaled-away",
        _gang(running=True),
        _context(is_scaled_away=True),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.SUCCEEDED,
    ),
    (
        "shrink-without-grace-at-once",
        _gang(running=True, shrink_to=1),
        _context(),
        lifecycle.Action.SHRINK,
        None,
    ),
    (
        "shrink-asked-runs-whole-until-answered",
        _gang(running=True, shrink_to=1),
        _context(checkpoint_requested_at_s=90.0, evict_by_s=150.0),
        lifecycle.Action.REQUEST_CHECKPOINT,
        None,
    ),
    (
        "shrink-answered",
        _gang(running=True, shrink_to=1),
        _context(checkpoint_requested_at_s=90.0, evict_by_s=150.0, last_checkpoint_at_s=95.0),
        lifecycle.Action.SHRINK,
        None,
    ),
    (
        "shrink-at-the-end-of-its-grace",
        _gang(running=True, shrink_to=1),
        _context(now=150.0, checkpoint_requested_at_s=90.0, evict_by_s=150.0),
        lifecycle.Action.SHRINK,
        None,
    ),
    (
        "shrink-before-start-asks-nothing",
        _gang(pods={0: _pod(0, gated=True), 1: _pod(1, gated=True)}, shrink_to=1),
        _context(checkpoint_requested_at_s=90.0, evict_by_s=150.0),
        lifecycle.Action.SHRINK,
        None,
    ),
    (
        "shrink-goes-on-while-its-leaving-pods-go",
        _gang(running=True, pods={0: _pod(0)}, claims={0: _claim(0)}, shrink_to=1),
        _context(),
        lifecycle.Action.SHRINK,
        None,
    ),
    (
        "shrink-a-kept-pod-failed-restarts-the-gang",
        _gang(running=True, pods={0: _pod(0, phase="Failed"), 1: _pod(1)}, shrink_to=1),
        _context(checkpoint_requested_at_s=90.0, evict_by_s=150.0),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.REQUEUE,
    ),
    (
        "shrink-of-a-deleted-job",
        _gang(running=True, deleted=True, shrink_to=1),
        _context(),
        lifecycle.Action.TEARDOWN,
        lifecycle.Ending.DELETED,
    ),
    (
        "shrunk-pods-learn-their-size",
        _gang(running=True, pods={0: _pod(0, size=4), 1: _pod(1, size=4)}),
        _context(),
        lifecycle.Action.ANNOUNCE_SIZE,
        None,
    ),
    (
        "shrunk-pods-drop-the-request",
        _gang(running=True, pods={0: _pod(0), 1: _pod(1, asked=True)}),
        _context(),
        lifecycle.Action.ANNOUNCE_SIZE,
        None,
    ),
]


@pytest.mark.parametrize(
    ("gang", "context", "action", "ending"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_assess(
    gang: lifecycle.Gang,
    context: lifecycle.Context,
    action: lifecycle.Action,
    ending: lifecycle.Ending | None,
) -> None:
    verdict = lifecycle.assess(gang, context)
    assert (verdict.action, verdict.ending) == (action, ending)


@pytest.mark.parametrize(
    ("context", "lost", "said"),
    [
        (_context(now=130.0, started_at_s=10.0), 4 * 120.0, ""),
        (
            _context(
                now=130.0,
                started_at_s=10.0,
                checkpoint_requested_at_s=90.0,
                evict_by_s=150.0,
                last_checkpoint_at_s=100.0,
            ),
            4 * 30.0,
            " after the checkpoint it was asked for",
        ),
        (
            _context(
                now=150.0,
                started_at_s=10.0,
                checkpoint_requested_at_s=90.0,
                evict_by_s=150.0,
                last_checkpoint_at_s=50.0,
            ),
            4 * 100.0,
            ": no checkpoint within 60s of the request",
        ),
    ],
    ids=["no-grace", "answered", "not-answered"],
)
def test_a_shrink_loses_the_whole_gangs_work_since_its_checkpoint(
    context: lifecycle.Context, lost: float, said: str
) -> None:
    """Both replicas' devices count, not only the leaving one's: the gang re-forms whole."""
    verdict = lifecycle.assess(_gang(running=True, shrink_to=1), context)
    assert verdict.action is lifecycle.Action.SHRINK
    assert (verdict.lost_device_s, verdict.reason) == (lost, f"shrunk from 2 to 1 replicas{said}")


def test_size_is_announced_to_the_pods_that_do_not_show_it() -> None:
    gang = _gang(running=True, pods={0: _pod(0), 1: _pod(1, size=4)})
    assert lifecycle.assess(gang, _context()).replicas == (1,)


REASONS = [
    (
        "exit-code",
        _gang(
            pods={
                0: _pod(0, phase="Failed", terminated={"exitCode": 3, "reason": "Error"}),
                1: _pod(1),
            }
        ),
        _context(restarts=1, max_restarts=1),
        ("ReplicaFailed", "replica 0 on gpu-0 exited with code 3 (Error); 1 of 1 restarts used"),
    ),
    (
        "oom-killed-restarts",
        _gang(
            pods={
                0: _pod(0),
                1: _pod(1, phase="Failed", terminated={"exitCode": 137, "reason": "OOMKilled"}),
            }
        ),
        _context(restarts=0, max_restarts=2),
        ("OOMKilled", "replica 1 on gpu-1 exited with code 137 (OOMKilled); restart 1 of 2"),
    ),
    (
        "node-lost",
        _gang(running=True),
        _context(nodes=_on(UNREACHABLE), max_restarts=0),
        (
            "NodeLost",
            "replica 1 on gpu-1: node gpu-1 is NotReady (NodeStatusUnknown: Kubelet stopped "
            "posting node status.); 0 of 0 restarts used",
        ),
    ),
    (
        "node-tainted-by-the-taint-manager",
        _gang(
            running=True,
            pods={0: _pod(0), 1: _evicted(1, lifecycle.TAINT_MANAGER, "Taint manager: ...")},
        ),
        _context(nodes=_on(_node("gpu-1", taints=(MAINTENANCE,))), max_restarts=1),
        (
            "NodeTainted",
            "replica 1 on gpu-1 was evicted: node gpu-1 tainted gpu-maintenance=true:NoExecute; "
            "restart 1 of 1",
        ),
    ),
    (
        "pod-gone-from-a-tainted-node",
        _gang(running=True, pods={1: _pod(1)}),
        _context(nodes=_on(_node("gpu-0", taints=(MAINTENANCE,)))),
        (
            "NodeTainted",
            "replica 0 on gpu-0 was evicted: node gpu-0 tainted gpu-maintenance=true:NoExecute; "
            "restart 1 of 3",
        ),
    ),
    (
        "node-deleted",
        _gang(running=True, pods={0: _pod(0)}),
        _context(nodes={model.NodeName("gpu-0"): NODES[model.NodeName("gpu-0")]}),
        ("NodeLost", "replica 1 on gpu-1: node gpu-1 no longer exists; restart 1 of 3"),
    ),
    (
        "drained",
        _gang(
            running=True,
            pods={
                0: _evicted(0, "EvictionByEvictionAPI", "Eviction API: evicting"),
                1: _pod(1),
            },
        ),
        _context(),
        (
            "Evicted",
            "replica 0 on gpu-0 was evicted: Eviction API: evicting (EvictionByEvictionAPI); "
            "restart 1 of 3",
        ),
    ),
    (
        "pod-deleted",
        _gang(running=True, pods={0: _pod(0), 1: _deleted(1)}),
        _context(),
        ("ReplicaLost", "replica 1 on gpu-1: its pod was deleted; restart 1 of 3"),
    ),
    (
        "startup-timeout",
        _gang(pods={0: _pod(0), 1: _pod(1, ready=False)}),
        _context(now=700.0, max_restarts=0),
        (
            "StartupTimeout",
            "replica 1 on gpu-1: not Ready within startupTimeoutSeconds=600; 0 of 0 restarts used",
        ),
    ),
    (
        "max-runtime",
        _gang(running=True),
        _context(started_at_s=10.0, max_runtime_s=60.0),
        ("MaxRuntimeExceeded", "stopped: ran past maxRuntimeSeconds=60"),
    ),
]


@pytest.mark.parametrize(
    ("gang", "context", "expected"), [c[1:] for c in REASONS], ids=[c[0] for c in REASONS]
)
def test_failure_reasons_name_replica_node_and_cause(
    gang: lifecycle.Gang, context: lifecycle.Context, expected: tuple[str, str]
) -> None:
    verdict = lifecycle.assess(gang, context)
    assert (status.condition_reason(verdict.cause), verdict.reason) == expected


def _record(key: str, replicas: int, *, phase: str = "Running") -> jobs.JobRecord:
    return jobs.JobRecord(
        key=model.JobKey(key),
        uid=key,
        tenant=model.Tenant("t"),
        tier="prod-inference",
        priority=0,
        replicas=replicas,
        devices_per_replica=8,
        device_class="gpu.nvidia.com",
        phase=phase,
        submitted_at=0.0,
        admitted_at=None,
        started_at=None,
        finished_at=None,
        position=None,
        reason=None,
        attempts=1,
        preemptions=0,
        restarts=0,
        borrowed=0,
        is_evicting=False,
    )


@pytest.mark.parametrize(
    ("wanted", "extensions", "expected"),
    [
        (2, [], (0, 0, (), 0)),
        (3, [], (2, 1, (), 0)),
        (5, [("ns/j+2", 1)], (3, 2, (), 0)),
        (2, [("ns/j+2", 1)], (0, 0, ("ns/j+2",), 0)),
        (3, [("ns/j+2", 2)], (0, 0, ("ns/j+2",), 0)),
        (1, [], (0, 0, (), 1)),
        (1, [("ns/j+2", 1)], (0, 0, ("ns/j+2",), 0)),
    ],
    ids=[
        "steady",
        "up",
        "up-again",
        "down-drops-entry",
        "partly-needed-entry-ends",
        "below-base-shrinks",
        "entries-end-before-shrink",
    ],
)
def test_scale_plan(
    wanted: int, extensions: list[tuple[str, int]], expected: tuple[int, int, tuple[str, ...], int]
) -> None:
    plan = scale.plan(
        wanted, base=_record("ns/j", 2), extensions=[_record(k, n) for k, n in extensions]
    )
    assert (plan.first, plan.add, tuple(r.key for r in plan.drop), plan.shrink_to) == expected


ASKED = {"checkpoint_requested_at_s": 50.5, "evict_by_s": 170.5, "started_at_s": 10.0}


@pytest.mark.parametrize(
    ("running", "context", "action", "lost"),
    [
        pytest.param(True, _context(**ASKED), lifecycle.Action.REQUEST_CHECKPOINT, None, id="ask"),
        pytest.param(
            True,
            _context(**ASKED, last_checkpoint_at_s=40.0),
            lifecycle.Action.REQUEST_CHECKPOINT,
            None,
            id="older-checkpoint-asks",
        ),
        # a report stamped in the request's second answers it (pods read whole seconds)
        pytest.param(
            True,
            _context(**ASKED, last_checkpoint_at_s=50.0),
            lifecycle.Action.TEARDOWN,
            4 * 50.0,
            id="answered",
        ),
        pytest.param(
            True,
            _context(**{**ASKED, "now": 171.0}, last_checkpoint_at_s=40.0),
            lifecycle.Action.TEARDOWN,
            4 * 131.0,
            id="grace-over",
        ),
        pytest.param(
            False,
            _context(**{**ASKED, "started_at_s": None}),
            lifecycle.Action.TEARDOWN,
            0.0,
            id="never-started",
        ),
        pytest.param(True, _context(), lifecycle.Action.TEARDOWN, None, id="not-cooperative"),
    ],
)
def test_a_victim_asked_for_a_checkpoint_runs_until_it_answers_or_its_grace_ends(
    running: bool, context: lifecycle.Context, action: lifecycle.Action, lost: float | None
) -> None:
    gang = _gang(pods={0: _pod(0), 1: _pod(1)}, running=running, evicting=True)
    verdict = lifecycle.assess(gang, context)
    assert verdict.action is action
    assert verdict.lost_device_s == lost
    if action is lifecycle.Action.TEARDOWN:
        assert verdict.ending is lifecycle.Ending.PREEMPTED
