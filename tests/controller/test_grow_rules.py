"""What `assess` decides for a growing gang (rule 13), and what its status shows: the replicas
it ran with are judged as any running gang's, the added ones only decide the grow. Pure
functions, no cluster needed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gangq.queue.core import model
from gangq.queue.kube import lifecycle, status
from gangq.queue.store import jobs
from tests.controller.test_lifecycle_rules import (
    DEVICES,
    PLACEMENT,
    _claim,
    _context,
    _gang,
    _node,
    _on,
    _pod,
)

ADDED = tuple(
    model.ReplicaPlacement(replica=r, node=model.NodeName(f"gpu-{r}"), devices=DEVICES[r % 2])
    for r in (2, 3)
)
NODES = _on(*(_node(f"gpu-{r}") for r in (2, 3)))
GROWTH = lifecycle.Growth(from_size=2, started_at_s=1000.0)


def _growing(pods: dict[int, Any], claims: dict[int, Any] | None = None) -> lifecycle.Gang:
    """A gang of 2 running replicas growing to 4, with the added replicas' objects given."""
    running = {0: _pod(0), 1: _pod(1)}
    held = {0: _claim(0), 1: _claim(1)}
    added_claims = claims if claims is not None else {r: _claim(r % 2) for r in pods}
    return dataclasses.replace(
        _gang(running=True, pods={**running, **pods}, claims={**held, **added_claims}),
        placement=(*PLACEMENT, *ADDED),
        growing=GROWTH,
    )


def _assess(gang: lifecycle.Gang, *, now: float = 1010.0) -> lifecycle.Verdict:
    return lifecycle.assess(gang, _context(now=now, nodes=NODES, started_at_s=500.0))


@pytest.mark.parametrize(
    ("pods", "claims"),
    [
        ({}, {}),
        ({2: _pod(2, gated=True)}, None),
        ({2: _pod(2, gated=True), 3: _pod(3, gated=True)}, None),
        ({2: _pod(2), 3: _pod(3, gated=True)}, None),
    ],
    ids=["nothing-built", "one-pod-missing", "all-gated", "one-still-gated"],
)
def test_added_replicas_missing_or_gated_are_built_not_failures(
    pods: dict[int, Any], claims: dict[int, Any] | None
) -> None:
    assert _assess(_growing(pods, claims)).action is lifecycle.Action.GROW


def test_all_added_replicas_ready_end_the_grow_and_not_before() -> None:
    ready = {2: _pod(2), 3: _pod(3)}
    assert _assess(_growing(ready)).action is lifecycle.Action.GROWN
    starting = {2: _pod(2), 3: _pod(3, phase="Pending", ready=False)}
    assert _assess(_growing(starting)).action is lifecycle.Action.WAIT


def test_added_replicas_not_ready_within_the_startup_timeout_of_the_grow_undo_it() -> None:
    starting = {2: _pod(2), 3: _pod(3, phase="Pending", ready=False)}
    assert _assess(_growing(starting), now=1000.0 + 599).action is lifecycle.Action.WAIT
    verdict = _assess(_growing(starting), now=1000.0 + 601)
    assert verdict.action is lifecycle.Action.UNDO_GROW
    assert verdict.reason == (
        "grow to 4 failed: replica 3 on gpu-3: not Ready within startupTimeoutSeconds=600"
    )
    never_built = _assess(_growing({}, {}), now=1000.0 + 601)
    assert never_built.action is lifecycle.Action.UNDO_GROW


def test_a_failed_added_replica_undoes_the_grow_and_not_the_job() -> None:
    failed = _pod(3, phase="Failed", ready=False, terminated={"exitCode": 1, "reason": "Error"})
    verdict = _assess(_growing({2: _pod(2), 3: failed}))
    assert verdict.action is lifecycle.Action.UNDO_GROW
    assert verdict.ending is None
    assert verdict.reason == "grow to 4 failed: replica 3 on gpu-3 exited with code 1 (Error)"


def test_a_lost_node_or_a_changed_claim_of_an_added_replica_undoes_the_grow() -> None:
    lost = dataclasses.replace(_growing({2: _pod(2, gated=True)}))
    context = _context(
        now=1010.0, nodes=_on(_node("gpu-2", ready=False, unready_reason="KubeletDown: x"))
    )
    assert lifecycle.assess(lost, context).action is lifecycle.Action.UNDO_GROW
    changed = _growing({2: _pod(2, gated=True)}, {2: _claim(2 % 2, DEVICES[1])})
    verdict = _assess(changed)
    assert verdict.action is lifecycle.Action.UNDO_GROW
    assert "holds" in verdict.reason and "instead of the reserved" in verdict.reason


def test_a_failed_running_replica_while_growing_fails_the_whole_gang() -> None:
    failed = _pod(1, phase="Failed", ready=False, terminated={"exitCode": 2, "reason": "Error"})
    gang = _growing({2: _pod(2, gated=True)})
    gang = dataclasses.replace(gang, pods={**gang.pods, 1: failed})
    verdict = _assess(gang)
    assert (verdict.action, verdict.ending) == (lifecycle.Action.TEARDOWN, lifecycle.Ending.REQUEUE)
    assert [f.replica for f in verdict.failures] == [1]


def test_a_growing_gang_that_is_evicted_or_deleted_is_torn_down_whole() -> None:
    evicted = dataclasses.replace(_growing({2: _pod(2, gated=True)}), is_evicting=True)
    assert _assess(evicted).action is lifecycle.Action.TEARDOWN
    deleted = dataclasses.replace(evicted, is_evicting=False, job=None)
    verdict = _assess(deleted)
    assert (verdict.action, verdict.ending) == (lifecycle.Action.TEARDOWN, lifecycle.Ending.DELETED)


def test_a_growing_job_shows_the_size_it_runs_at_and_what_it_grows_to() -> None:
    record = jobs.JobRecord(
        key=model.JobKey("ns/job"),
        uid="u",
        tenant=model.Tenant("t"),
        tier="training",
        priority=0,
        replicas=4,
        devices_per_replica=2,
        device_class="gpu.nvidia.com",
        phase="Running",
        submitted_at=0.0,
        admitted_at=1.0,
        started_at=2.0,
        finished_at=None,
        position=None,
        reason=None,
        attempts=1,
        preemptions=0,
        restarts=0,
        borrowed=0,
        is_evicting=False,
        min_replicas=2,
        size=4,
        grown_from=2,
    )
    placement = (*PLACEMENT, *ADDED)
    shown = status.desired(record, placement=placement, replicas=4, problem=None, now="t")
    assert (shown["size"], shown["reason"]) == ("2/4", "growing from 2 to 4 replicas")
    grown = dataclasses.replace(record, grown_from=None)
    shown = status.desired(grown, placement=placement, replicas=4, problem=None, now="t")
    assert (shown["size"], shown["reason"]) == ("4/4", "")
