"""Corpus section 5: DRA objects, allocation validation and the scheduler's claim lifecycle."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .conftest import Case, Replay, load, run, until

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ref/resourceclaims"
PODS = "/api/v1/namespaces/ref/pods"
MERGE = "application/merge-patch+json"
RESERVED = ("status.reservedFor.0.name", "status.reservedFor.0.resource")


def _claim(name: str, source: str = "5-05", **metadata: Any) -> Callable[[Replay], Awaitable[Any]]:
    async def create(reference: Replay) -> None:
        case = load(source)
        shown = (
            case["response"]["body"]
            if case["response"]["body"].get("kind") == "ResourceClaim"
            else case["request"]["body"]
        )
        body = {
            "metadata": {"name": name, "labels": {"gangq.dev/job": "ref-job"}, **metadata},
            "spec": copy.deepcopy(shown["spec"]),
        }
        reply = await reference.call("POST", CLAIMS, body)
        assert reply.status == 201, reply.body

    return create


def _allocate(name: str, source: str) -> Callable[[Replay], Awaitable[Any]]:
    """Write a captured allocation into this run's claim `name`."""

    async def write(reference: Replay) -> None:
        reply = await reference.call(
            "PATCH", f"{CLAIMS}/{name}/status", load(source)["request"]["body"], content_type=MERGE
        )
        assert reply.status == 200, reply.body

    return write


def _pod(name: str, claim: str, *, gated: bool = False) -> Callable[[Replay], Awaitable[Any]]:
    async def create(reference: Replay) -> None:
        body = copy.deepcopy(load("5-28")["request"]["body"])
        body["metadata"] = {"name": name}
        body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
        if not gated:
            body["spec"].pop("schedulingGates", None)
        reply = await reference.call("POST", PODS, body)
        assert reply.status == 201, reply.body

    return create


def _running(pod: str) -> Callable[[Replay], Awaitable[Any]]:
    return until(
        f"{PODS}/{pod}", lambda r: r.status == 200 and r.body["status"].get("phase") == "Running"
    )


def _deleted(pod: str) -> tuple[Callable[[Replay], Awaitable[Any]], ...]:
    async def delete(reference: Replay) -> None:
        await reference.call("DELETE", f"{PODS}/{pod}", query={"gracePeriodSeconds": "0"})

    return delete, until(f"{PODS}/{pod}", lambda r: r.status == 404)


def _settled(claim: str) -> Callable[[Replay], Awaitable[Any]]:
    return until(
        f"{CLAIMS}/{claim}",
        lambda r: r.status == 404 or not (r.body.get("status") or {}).get("reservedFor"),
    )


GANG = (_claim("gang-0"),)
ALLOCATED = (*GANG, "5-07")
SCHEDULED = (*ALLOCATED, "5-28", "5-29", _running("gang-0-pod"))
GHOST = (
    _claim("ghost-device"),
    _allocate("ghost-device", "5-16"),
    _pod("ghost-pod", "ghost-device"),
    _running("ghost-pod"),
)
SCHED_ALLOC = (
    _claim("sched-alloc", "5-37"),
    _pod("sched-alloc-pod", "sched-alloc"),
    _running("sched-alloc-pod"),
)
MANUAL_FIN = (
    _claim("manual-fin", "5-44", finalizers=["resource.kubernetes.io/delete-protection"]),
    _allocate("manual-fin", "5-07"),
    _pod("manual-fin-pod", "manual-fin"),
    _running("manual-fin-pod"),
)
MANUAL_FIN_2 = (
    _claim("manual-fin-2", "5-44", finalizers=["resource.kubernetes.io/delete-protection"]),
    _allocate("manual-fin-2", "5-07"),
    _pod("manual-fin-2-pod", "manual-fin-2"),
    _running("manual-fin-2-pod"),
)

SECTION_5 = [
    Case("5-01", paths=("spec",)),
    Case("5-02", names=True),
    Case("5-03", names=True),
    Case("5-04"),
    Case("5-05", paths=("spec", "status")),
    Case("5-06", setup=GANG, paths=("status",)),
    Case("5-07", setup=GANG, paths=("status.allocation",)),
    Case("5-08", setup=ALLOCATED, message=False),
    Case("5-09", setup=(_claim("ts-change"), _allocate("ts-change", "5-07")), message=False),
    Case("5-10", setup=ALLOCATED, message=False),
    Case("5-11", setup=ALLOCATED, message=False),
    Case("5-12", setup=(_claim("bad-request"),)),
    Case("5-13", setup=(_claim("bad-request"),), paths=("status.allocation",)),
    Case("5-14", setup=(_claim("bad-devname"),)),
    Case("5-15", setup=(_claim("reserve-unalloc"),)),
    Case("5-16", setup=(_claim("ghost-device"),), paths=("status.allocation",)),
    Case("5-17", setup=(_claim("ghost-pool"),), paths=("status.allocation",)),
    Case("5-18", setup=(_claim("short-alloc"),), paths=("status.allocation",)),
    Case("5-19", setup=(*ALLOCATED, _claim("double-booked")), paths=("status.allocation",)),
    Case("5-20", setup=(_claim("no-nodesel"),), paths=("status.allocation",)),
    Case("5-21", setup=(_claim("no-nodesel"), "5-20"), paths=("status",)),
    Case("5-22", message=False),
    Case("5-23", paths=("spec",)),
    Case("5-24", paths=("spec",)),
    Case("5-25", paths=("spec",)),
    Case("5-25b"),
    Case("5-26"),
    Case("5-27", paths=("spec",)),
    Case("5-28", setup=ALLOCATED, paths=("spec.resourceClaims", "spec.schedulingGates")),
    Case("5-29", setup=(*ALLOCATED, "5-28"), paths=("spec.schedulingGates",)),
    Case("5-30", setup=SCHEDULED, paths=("spec.nodeName", "status.phase")),
    Case("5-31", setup=SCHEDULED, paths=(*RESERVED, "status.allocation")),
    Case("5-32", setup=SCHEDULED),
    Case("5-33", setup=SCHEDULED, paths=RESERVED),
    Case("5-34", setup=(*SCHEDULED, "5-33")),
    Case("5-35", setup=GHOST, paths=("spec.nodeName", "status.phase")),
    Case("5-36", setup=GHOST, paths=(*RESERVED, "status.allocation")),
    Case(
        "5-37",
        setup=SCHED_ALLOC,
        paths=(
            *RESERVED,
            "status.allocation.devices.results.0.request",
            "status.allocation.devices.results.0.driver",
        ),
    ),
    Case("5-38", setup=SCHED_ALLOC, paths=("status.phase",)),
    Case(
        "5-39",
        setup=(*SCHED_ALLOC, *_deleted("sched-alloc-pod"), _settled("sched-alloc")),
        paths=("status",),
    ),
    Case("5-40", setup=(_claim("ghost-pool"), _allocate("ghost-pool", "5-17")), paths=("status",)),
    Case("5-41", setup=GANG),
    Case(
        "5-43",
        setup=(*GHOST, *_deleted("ghost-pod"), _settled("ghost-device")),
        paths=("status.allocation",),
    ),
    Case("5-44", setup=MANUAL_FIN, paths=RESERVED),
    Case("5-45", setup=(*MANUAL_FIN, "5-44", *_deleted("manual-fin-pod"), _settled("manual-fin"))),
    Case(
        "5-46",
        setup=(*MANUAL_FIN_2, *_deleted("manual-fin-2-pod"), _settled("manual-fin-2")),
        paths=("status",),
    ),
]


@pytest.mark.parametrize("case", SECTION_5, ids=str)
async def test_section_5_dra(reference: Replay, case: Case) -> None:
    await run(reference, case)


async def test_section_5_scheduler_allocation_and_release_writes(reference: Replay) -> None:
    """5-42: ADDED, finalizer, allocation+reservedFor in one write, deallocation, finalizer
    removed."""
    since = (await reference.call("GET", CLAIMS)).body["metadata"]["resourceVersion"]
    await _claim("sched-alloc-2", "5-37")(reference)
    await _pod("sched-alloc-2-pod", "sched-alloc-2")(reference)
    await _running("sched-alloc-2-pod")(reference)
    for step in (
        *_deleted("sched-alloc-2-pod"),
        until(f"{CLAIMS}/sched-alloc-2", lambda r: not r.body["metadata"].get("finalizers")),
    ):
        await step(reference)
    request = load("5-42")["request"]
    reply = await reference.send(
        request | {"query": dict(request["query"], resourceVersion=since, timeoutSeconds="1")}
    )
    expected = load("5-42")["response"]["body"]

    def summary(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [
            (
                e["type"],
                e["object"]["metadata"].get("finalizers"),
                bool((e["object"].get("status") or {}).get("allocation")),
                bool((e["object"].get("status") or {}).get("reservedFor")),
            )
            for e in events
        ]

    assert summary(reply.body) == summary(expected)
