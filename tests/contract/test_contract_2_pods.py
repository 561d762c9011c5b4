"""Corpus section 2: pods — scheduling gates, patches, conflicts, status, binding, deletion."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .conftest import Case, Replay, load, run

PODS = "/api/v1/namespaces/ref/pods"
GATES = ("spec.schedulingGates",)


def _pod_like(
    name: str,
    source: str,
    *,
    drop: tuple[str, ...] = ("nodeName", "volumes"),
    labels: bool = True,
    **spec: Any,
) -> Callable[[Replay], Awaitable[Any]]:
    """Create a pod shaped like the one a captured case shows (without server-set fields)."""

    async def create(reference: Replay) -> None:
        case = load(source)
        shown = (
            case["response"]["body"]
            if case["response"]["body"].get("kind") == "Pod"
            else case["request"]["body"]
        )
        body_spec = {k: copy.deepcopy(v) for k, v in shown["spec"].items() if k not in drop}
        if "volumes" in drop:
            for container in body_spec.get("containers", []):
                container.pop("volumeMounts", None)
        body_spec.update(spec)
        metadata = {"name": name}
        if labels and shown["metadata"].get("labels"):
            metadata["labels"] = dict(shown["metadata"]["labels"])
        reply = await reference.call(
            "POST",
            PODS,
            {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body_spec},
        )
        assert reply.status == 201, reply.body

    return create


def _gated(name: str, *gates: str) -> Callable[[Replay], Awaitable[Any]]:
    names = gates or ("gangq.dev/admission",)
    return _pod_like(name, "2-01", labels=False, schedulingGates=[{"name": gate} for gate in names])


def _running(name: str) -> Callable[[Replay], Awaitable[Any]]:
    async def wait(reference: Replay) -> None:
        storage = reference.cluster.registry.storage
        for _ in range(500):
            found = storage.get("/pods", "ref", name)
            if found and found["status"].get("phase") == "Running":
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"pod {name} never ran")

    return wait


RUN_A = (_pod_like("run-a", "2-32", drop=()), _running("run-a"))
RUN_A_LABELLED = (*RUN_A, "2-34")
RELEASED = ("2-01", "2-06", _running("gated"))
STALE = (_pod_like("stale", "2-20", drop=("nodeName",)),)

SECTION_2 = [
    Case(
        "2-01",
        paths=(
            *GATES,
            "status.phase",
            "status.conditions.0.reason",
            "status.qosClass",
            "spec.restartPolicy",
            "spec.dnsPolicy",
            "spec.schedulerName",
            "spec.tolerations",
            "spec.enableServiceLinks",
            "spec.priority",
            "spec.preemptionPolicy",
            "spec.containers.0.imagePullPolicy",
            "spec.containers.0.terminationMessagePath",
        ),
    ),
    Case("2-02", setup=("2-01",)),
    Case("2-03", setup=("2-01",)),
    Case("2-04", setup=("2-01",)),
    Case("2-05", setup=("2-01",)),
    Case("2-06", setup=("2-01",), paths=(*GATES, "metadata.generation")),
    Case(
        "2-07",
        setup=RELEASED,
        paths=("status.phase", "status.conditions.3.type", "status.qosClass"),
    ),
    Case("2-08", setup=(_gated("gate-smp-null"),), paths=GATES),
    Case("2-09", setup=(_gated("gate-smp-empty-list"),), paths=GATES),
    Case("2-10", setup=(_gated("gate-smp-patch-delete-directive"),), paths=GATES),
    Case("2-11", setup=(_gated("gate-smp-patch-replace-directive"),), paths=GATES),
    Case("2-12", setup=(_gated("gate-smp-setelementorder-empty"),), paths=GATES),
    Case("2-13", setup=(_gated("gate-mergepatch-null"),), paths=GATES),
    Case("2-14", setup=(_gated("gate-mergepatch-empty-list"),), paths=GATES),
    Case(
        "2-15",
        setup=(_gated("gate-two", "gangq.dev/admission", "other.example.com/hold"),),
        paths=GATES,
    ),
    Case(
        "2-16",
        setup=(_gated("gate-two", "gangq.dev/admission", "other.example.com/hold"), "2-15"),
        paths=GATES,
    ),
    Case("2-17", setup=STALE),
    Case("2-18", setup=STALE),
    Case("2-19", setup=STALE),
    Case("2-20", setup=STALE, paths=("metadata.labels",)),
    Case("2-21"),
    Case("2-22"),
    Case("2-23", setup=("2-01",)),
    Case("2-24"),
    Case("2-25"),
    Case("2-26"),
    Case("2-27"),
    Case("2-28"),
    Case("2-29", setup=("2-01",)),
    Case("2-30"),
    Case("2-31"),
    Case("2-32", setup=RUN_A, paths=("status.phase", "spec.nodeName", "status.qosClass")),
    Case("2-33", setup=RUN_A, paths=("status.phase", "metadata.labels")),
    Case(
        "2-34",
        setup=RUN_A,
        paths=(
            "spec.activeDeadlineSeconds",
            "metadata.labels",
            "metadata.annotations",
            "spec.containers.0.image",
        ),
    ),
    Case("2-35", setup=(*RUN_A, "2-34"), paths=("status.conditions.0.type",)),
    Case(
        "2-36",
        setup=RUN_A_LABELLED,
        paths=("spec.activeDeadlineSeconds", "status.message", "metadata.generation"),
    ),
    Case("2-37", setup=RUN_A),
    Case("2-38", setup=RUN_A, message=False),
    Case("2-39", setup=(_pod_like("bind-me", "2-40"),)),
    Case(
        "2-40",
        setup=(_pod_like("bind-me", "2-40"), "2-39"),
        paths=("spec.nodeName", "status.conditions.0.type", "status.conditions.0.status"),
    ),
    Case("2-41", setup=(_pod_like("bind-me", "2-40"), "2-39")),
    Case("2-42", setup=(_gated("bind-gated"),)),
    Case("2-43", setup=(_gated("bind-gated"),)),
    Case("2-44", setup=(_gated("del-pending"),), paths=("metadata.deletionGracePeriodSeconds",)),
    Case("2-45", setup=(_gated("del-pending"), "2-44")),
    Case("2-46", setup=RELEASED, paths=("metadata.deletionGracePeriodSeconds",)),
    Case("2-47", setup=(_pod_like("del-opts", "2-48", drop=()),), message=False),
    Case(
        "2-48",
        setup=(_pod_like("del-opts", "2-48", drop=()),),
        paths=("metadata.deletionGracePeriodSeconds",),
    ),
    Case("2-49", setup=(_pod_like("evict-me", "2-48"), _running("evict-me"))),
    Case("2-50"),
    Case("2-51", setup=RUN_A, message=False),
    Case("2-52", setup=RUN_A_LABELLED, paths=("spec.tolerations",)),
    Case(
        "2-53", setup=(*RUN_A_LABELLED, "2-52"), paths=("metadata.labels", "metadata.annotations")
    ),
    Case("2-54", setup=(_gated("gate-ssa"),), paths=GATES),
]


@pytest.mark.parametrize("case", SECTION_2, ids=str)
async def test_section_2_pods(reference: Replay, case: Case) -> None:
    await run(reference, case)
