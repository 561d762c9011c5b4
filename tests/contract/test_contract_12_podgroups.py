"""Corpus section 12: Workloads, PodGroups and gang scheduling (alpha gates GenericWorkload,
GangScheduling, DRAWorkloadResourceClaims), replayed against `Emulator(podgroups=True)`.

Each scenario replays its cases in the captured order on one emulator and checks every answer
against the capture: status codes, Status messages and causes, object shapes, conditions,
events, and whether the pods of a gang were bound together or not at all. Where the capture
holds run-specific values (node names the real scheduler picked, uids, times) the scenario
compares what they mean instead (bound or not, the same node as the pre-allocated claim).

Known differences the checks allow for, as docs/emulator.md lists them:
- `/apis/scheduling.k8s.io` lists only v1alpha2: the emulator serves no PriorityClasses
  (scheduling.k8s.io/v1), which a real server lists first and prefers (12-01b).
- The emulator's FitError text says `untolerated taint {key: value}` and `still not
  schedulable` where 1.36 says `untolerated taint(s)` and, for a pod without claims, `no new
  claims to deallocate` (12-29b); `_fit_wording` maps them, everything else must match.
- Within a pod-group cycle the emulator places a gang's pods in queue order (priority, then
  age, then name); the capture shows another order, so which member gets the FitError (12-29,
  12-118) and which one hits the duplicate reservation (12-74) is found, not assumed.
- The pod-update 422 (12-78, 12-79, 12-81) carries no Go struct diff: its first line must match.
- Waits are shorter than captured ("after 5 s", run-seconds 30) where only the outcome counts.

Left out: 12-113..12-116 (WorkloadWithJob: an Indexed Job makes the job controller create a
Workload and a PodGroup and inject `schedulingGroup` into its pods). The emulator serves no
batch/v1 and runs no job controller, so there is nothing to replay them against.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gangq.queue.kubesim.gangscheduling import UNSCHEDULABLE, WAITING

from .conftest import Case, Replay, load, run, until

PODS = "/api/v1/namespaces/pg-ref/pods"
GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/pg-ref/podgroups"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/pg-ref/resourceclaims"
EVENTS = "/api/v1/namespaces/pg-ref/events"
MERGE = "application/merge-patch+json"
RUN_SECONDS = "sim.gangq.dev/run-seconds"
CONDITION = tuple(f"status.conditions.0.{key}" for key in ("type", "status", "reason", "message"))
"""A PodGroup's PodGroupScheduled condition, or a pending pod's PodScheduled one."""
POD_CONDITION = (*CONDITION, "status.conditions.0.observedGeneration")
Step = Callable[[Replay], Awaitable[Any]]


# --- steps ------------------------------------------------------------------------------


def _pod_like(source: str, name: str, *, run: str | None = None, **spec: Any) -> Step:
    """POST the pod of a captured POST under another name (the capture shows one of several
    alike pods being created); `spec` values replace fields, None removes one."""

    async def create(reference: Replay) -> None:
        body = copy.deepcopy(load(source)["request"]["body"])
        body["metadata"]["name"] = name
        if run is not None:
            body["metadata"]["annotations"][RUN_SECONDS] = run
        for key, value in spec.items():
            if value is None:
                body["spec"].pop(key, None)
            else:
                body["spec"][key] = value
        reply = await reference.call("POST", PODS, body)
        assert reply.status == 201, reply.body

    return create


def _pod(name: str, check: Callable[[dict[str, Any]], bool]) -> Step:
    return until(f"{PODS}/{name}", lambda r: r.status == 200 and check(r.body))


def _bound(name: str) -> Step:
    return _pod(name, lambda pod: bool(pod["spec"].get("nodeName")))


def _phase(name: str, phase: str) -> Step:
    return _pod(name, lambda pod: pod["status"].get("phase") == phase)


def _told(name: str) -> Step:
    """The pod carries kube-scheduler's PodScheduled=False/Unschedulable."""
    return _pod(
        name,
        lambda pod: any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in pod["status"].get("conditions") or []
        ),
    )


def _gone(path: str) -> Step:
    return until(path, lambda r: r.status == 404)


def _delete(name: str) -> Step:
    async def delete(reference: Replay) -> None:
        reply = await reference.call("DELETE", f"{PODS}/{name}")
        assert reply.status == 200, reply.body

    return delete


def _events(name: str, count: int) -> Step:
    async def wait(reference: Replay) -> None:
        for _ in range(500):
            if len((await _events_of(reference, name)).body["items"]) >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{name} never had {count} events")

    return wait


def _claim(name: str, source: str, allocation: str, **device: str) -> Step:
    """Create a claim with a captured spec and write a captured allocation, as the client of
    the capture did (12-62), optionally naming other devices."""

    async def create(reference: Replay) -> None:
        spec = load(source)["response"]["body"]["spec"]
        reply = await reference.call("POST", CLAIMS, {"metadata": {"name": name}, "spec": spec})
        assert reply.status == 201, reply.body
        body = copy.deepcopy(load(allocation)["request"]["body"])
        for result in body["status"]["allocation"]["devices"]["results"]:
            result.update(device)
        reply = await reference.call("PATCH", f"{CLAIMS}/{name}/status", body, content_type=MERGE)
        assert reply.status == 200, reply.body

    return create


async def _shared_claim(reference: Replay) -> None:
    """Claim `shared` with the spec and the client-written allocation 12-72 shows (gpu-2)."""
    shown = load("12-72")["response"]["body"]
    reply = await reference.call(
        "POST", CLAIMS, {"metadata": {"name": "shared"}, "spec": shown["spec"]}
    )
    assert reply.status == 201, reply.body
    status = {"allocation": shown["status"]["allocation"]}
    reply = await reference.call(
        "PATCH", f"{CLAIMS}/shared/status", {"status": status}, content_type=MERGE
    )
    assert reply.status == 200, reply.body


async def _steps(reference: Replay, *steps: str | Step) -> None:
    for step in steps:
        if isinstance(step, str):
            reply = await reference.replay(step)
            assert reply.status == load(step)["response"]["status"], (step, reply.body)
        else:
            await step(reference)


async def _check(reference: Replay, name: str, *paths: str, **options: Any) -> Any:
    """Replay one case and compare it with the capture; returns the answer's body."""
    return (await run(reference, Case(name, paths=paths, **options))).body


# --- comparisons ------------------------------------------------------------------------


def _fit_wording(message: str) -> str:
    """The emulator's FitError in 1.36's words (see the module docstring)."""
    message = re.sub(r"untolerated taint \{[^}]*\}", "untolerated taint(s)", message)
    return message.replace("still not schedulable", "no new claims to deallocate")


def _normalized(message: str) -> str:
    message = re.sub(r" to gpu-\d+$", " to <node>", _fit_wording(message))
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uid>", message)


async def _events_of(reference: Replay, name: str) -> Any:
    selector = f"involvedObject.name={name},involvedObject.kind=Pod"
    return await reference.call("GET", EVENTS, query={"fieldSelector": selector})


def _summary(events: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What kube-scheduler said, per pod in time order: reason, type, action, reporter, the
    series count, the message (node names and uids left out)."""
    items = sorted(
        events["items"], key=lambda e: (e["involvedObject"]["name"], e.get("eventTime") or "")
    )
    return [
        (
            e["reason"],
            e["type"],
            e.get("action"),
            e.get("reportingComponent"),
            (e.get("series") or {}).get("count"),
            _normalized(e["message"]),
        )
        for e in items
    ]


def _at(body: dict[str, Any], paths: tuple[str, ...]) -> list[Any]:
    found = []
    for path in paths:
        current: Any = body
        for part in path.split("."):
            current = current[int(part)] if isinstance(current, list) else current.get(part)
        found.append(current)
    return found


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def _said(pod: dict[str, Any]) -> tuple[Any, ...]:
    condition = _condition(pod, "PodScheduled")
    return (condition.get("status"), condition.get("reason"), _fit_wording(condition["message"]))


async def _all_pods(reference: Replay) -> dict[str, dict[str, Any]]:
    reply = await reference.call("GET", PODS)
    return {pod["metadata"]["name"]: pod for pod in reply.body["items"]}


async def _bound_together(reference: Replay, *names: str) -> dict[str, str]:
    """Poll LISTs until one shows a member bound: then it must show all of them bound."""
    for _ in range(500):
        listed = await _all_pods(reference)
        nodes = {name: listed[name]["spec"].get("nodeName") for name in names}
        if any(nodes.values()):
            assert all(nodes.values()), f"a gang partly bound: {nodes}"
            return {name: str(node) for name, node in nodes.items()}
        await asyncio.sleep(0.01)
    raise AssertionError(f"{names} never bound")


def _cycles(reference: Replay, group: str) -> int:
    return reference.cluster.scheduler.gang_cycles.get(f"pg-ref/{group}", 0)


# --- discovery and plain requests --------------------------------------------------------


async def test_12_01_discovery_serves_workloads_and_podgroups_with_status(
    gang_reference: Replay,
) -> None:
    reply = await gang_reference.replay("12-01")
    expected = load("12-01")["response"]["body"]
    assert reply.status == 200
    assert reply.body["groupVersion"] == expected["groupVersion"]

    def shown(listing: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in r.items() if k != "storageVersionHash"} for r in listing["resources"]
        ]

    assert shown(reply.body) == shown(expected)
    assert all("storageVersionHash" in r for r in reply.body["resources"] if "/" not in r["name"])


async def test_12_01b_the_group_lists_the_served_version(gang_reference: Replay) -> None:
    """A real server lists v1 (PriorityClasses) first and prefers it; the emulator serves
    only v1alpha2 of this group, listed and preferred as the capture lists it."""
    reply = await gang_reference.replay("12-01b")
    expected = load("12-01b")["response"]["body"]
    assert reply.status == 200
    assert (reply.body["kind"], reply.body["name"]) == (expected["kind"], expected["name"])
    served = [v for v in expected["versions"] if v["version"] == "v1alpha2"]
    assert reply.body["versions"] == served
    assert reply.body["preferredVersion"] == served[0]


async def test_12_01_off_the_gates_serve_nothing_of_it(reference: Replay) -> None:
    reply = await reference.call("GET", "/apis/scheduling.k8s.io/v1alpha2")
    assert (reply.status, reply.body) == (404, "404 page not found\n")
    groups = (await reference.call("GET", "/apis")).body["groups"]
    assert "scheduling.k8s.io" not in [g["name"] for g in groups]


WORKLOAD = ("12-02",)
SPEC = ("spec",)
PLAIN = [
    Case("12-02", paths=SPEC),
    Case("12-03", setup=WORKLOAD, paths=SPEC),
    Case("12-04", setup=WORKLOAD),
    Case("12-05", setup=WORKLOAD),
    Case("12-06", setup=WORKLOAD, paths=(*SPEC, "metadata.labels")),
    Case("12-07"),
    Case("12-08"),
    Case("12-09", paths=(*SPEC, "status")),
    Case("12-10", setup=("12-09",), paths=(*SPEC, "status")),
    Case("12-11", setup=("12-09",)),
    Case("12-12", setup=WORKLOAD, paths=(*SPEC, "status")),
    Case("12-13"),
    Case("12-14"),
    Case("12-82"),
    Case("12-83"),
    Case("12-86", setup=("12-76",)),
    Case("12-87"),
    Case("12-88"),
    Case("12-89", setup=WORKLOAD, paths=(*SPEC, "status")),
    Case("12-90", setup=WORKLOAD),
    Case("12-91", setup=("12-76",), paths=(*SPEC, "status")),
    Case("12-92", paths=SPEC),
    Case("12-93", setup=(*WORKLOAD, "12-12")),
    Case("12-94", setup=(*WORKLOAD, "12-12", "12-93"), paths=(*SPEC, "status")),
]


@pytest.mark.parametrize("case", PLAIN, ids=str)
async def test_section_12_objects(gang_reference: Replay, case: Case) -> None:
    await run(gang_reference, case)


# --- gangs ------------------------------------------------------------------------------


async def test_12_15_to_26_a_gang_short_of_pods_waits_silently_then_binds_at_once(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-09", "spec", "status")
    await asyncio.sleep(0.3)
    await _check(ref, "12-15", "status")
    await _check(ref, "12-16", "spec.schedulingGroup", "status")
    await _check(ref, "12-17", "spec.schedulingGroup", "status")
    await asyncio.sleep(0.3)
    for name in ("12-18", "12-19"):
        assert "nodeName" not in (await _check(ref, name, "status"))["spec"]
    await _check(ref, "12-20", names=True)
    await _check(ref, "12-21", "status")
    assert _cycles(ref, "pg-a") == 0, "PreEnqueue holds a gang short of pods"
    await _check(ref, "12-22", "spec.schedulingGroup", "status")
    await _bound_together(ref, "pg-a-0", "pg-a-1", "pg-a-2")
    for case, name in (("12-23a", "pg-a-0"), ("12-23b", "pg-a-1"), ("12-23c", "pg-a-2")):
        await _phase(name, "Running")(ref)
        pod = await _check(ref, case, "status.phase")
        assert _condition(pod, "PodScheduled")["status"] == "True"
    await _check(ref, "12-24", *CONDITION)
    events = await _check(ref, "12-25")
    assert _summary(events) == _summary(load("12-25")["response"]["body"])
    await _check(ref, "12-26", names=True)
    assert _cycles(ref, "pg-a") == 1


async def test_12_27_to_32_48_to_54_a_gang_that_cannot_fit_binds_nothing_and_outlives_delete(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-27", "spec", "status")
    await _check(ref, "12-28", "spec.schedulingGroup", "spec.containers.0.ports", "status")
    for name in ("nofit-1", "nofit-2"):
        await _pod_like("12-28", name)(ref)
    for name in ("nofit-0", "nofit-1", "nofit-2"):
        await _told(name)(ref)
        await _events(name, 2)(ref)
    said = []
    for case in ("12-29a", "12-29b", "12-29c"):
        pod = await _check(ref, case)
        assert "nodeName" not in pod["spec"]
        said.append(_said(pod))
    captured = [_said(load(c)["response"]["body"]) for c in ("12-29a", "12-29b", "12-29c")]
    assert sorted(said) == sorted(captured)
    assert said.count(("False", "Unschedulable", WAITING)) == 2
    events = await _check(ref, "12-30")
    assert _summary(events) == _summary(load("12-30")["response"]["body"])
    events = await _check(ref, "12-31")

    def unnamed(body: dict[str, Any]) -> list[tuple[Any, ...]]:
        return sorted(_summary(body), key=str)

    captured_nofit = {
        "items": [
            e
            for e in load("12-31")["response"]["body"]["items"]
            if e["involvedObject"]["name"].startswith("nofit-")
        ]
    }
    assert unnamed(events) == unnamed(captured_nofit)
    group = await _check(ref, "12-32", *CONDITION)
    assert _condition(group, "PodGroupScheduled")["message"] == UNSCHEDULABLE
    before = _cycles(ref, "pg-nofit")
    versions = {
        name: pod["metadata"]["resourceVersion"] for name, pod in (await _all_pods(ref)).items()
    }
    await asyncio.sleep(0.2)
    assert _cycles(ref, "pg-nofit") > before + 20, "an unschedulable gang is retried at once"
    after = {
        name: pod["metadata"]["resourceVersion"] for name, pod in (await _all_pods(ref)).items()
    }
    assert after == versions, "retries write nothing"
    deleted = await _check(
        ref, "12-48", "metadata.finalizers", "metadata.deletionGracePeriodSeconds"
    )
    assert deleted["metadata"]["deletionTimestamp"]
    await _check(ref, "12-49", "metadata.finalizers", *CONDITION)
    await _check(ref, "12-50", *POD_CONDITION)
    await _check(ref, "12-51", "metadata.deletionGracePeriodSeconds", "status.phase")
    await _check(ref, "12-52", "metadata.finalizers", *CONDITION)
    await _delete("nofit-1")(ref)
    await _check(ref, "12-53", "metadata.deletionGracePeriodSeconds", "status.phase")
    await _gone(f"{GROUPS}/pg-nofit")(ref)
    await _check(ref, "12-54")
    stopped = _cycles(ref, "pg-nofit")
    await asyncio.sleep(0.05)
    assert _cycles(ref, "pg-nofit") == stopped, "no retries once the pods are gone"


async def test_12_33_to_47_gated_members_count_and_the_last_release_binds_the_gang(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-33", "spec", "status")
    created = await _check(ref, "12-34", "spec.schedulingGates", *CONDITION)
    await _pod_like("12-34", "gated-1")(ref)
    await _check(ref, "12-35", "spec.schedulingGates", *CONDITION)
    await _check(ref, "12-36", "metadata.generation", "spec.schedulingGates")
    await _told("gated-0")(ref)
    released = await _check(ref, "12-37", *POD_CONDITION)
    assert (
        _condition(released, "PodScheduled")["lastTransitionTime"]
        == (_condition(created, "PodScheduled")["lastTransitionTime"])
    ), "the condition keeps the time it went False (SchedulingGated)"
    await _events("gated-0", 2)(ref)
    events = await _check(ref, "12-38")
    assert _summary(events) == _summary(load("12-38")["response"]["body"])
    unschedulable = await _check(ref, "12-39", *CONDITION)
    await _check(ref, "12-40", "metadata.generation", "spec.schedulingGates")
    await _bound_together(ref, "gated-0", "gated-1")
    for case, name in (("12-41a", "gated-0"), ("12-41b", "gated-1")):
        await _phase(name, "Running")(ref)
        await _check(ref, case, "status.phase")
    scheduled = await _check(ref, "12-42", *CONDITION)
    since = _condition(scheduled, "PodGroupScheduled")["lastTransitionTime"]
    assert since >= _condition(unschedulable, "PodGroupScheduled")["lastTransitionTime"]
    events = await _check(ref, "12-43")
    assert _summary(events) == _summary(load("12-43")["response"]["body"])
    await _check(ref, "12-44", "metadata.deletionGracePeriodSeconds", "status.phase")
    await _check(ref, "12-45", "status.phase")
    await _gone(f"{PODS}/gated-0")(ref)
    await _check(ref, "12-46")
    group = await _check(ref, "12-47", *CONDITION)
    assert _condition(group, "PodGroupScheduled")["lastTransitionTime"] == since


async def test_12_55_to_60_a_missing_group_holds_its_pod_until_it_appears(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-55", "spec.schedulingGroup", "status")
    await asyncio.sleep(0.3)
    await _check(ref, "12-56", "status")
    await _check(ref, "12-57", names=True)
    await _check(ref, "12-58", "spec", "status")
    await _bound("late-0")(ref)
    pod = await _check(ref, "12-59", "spec.schedulingGroup")
    assert pod["spec"]["nodeName"] and _condition(pod, "PodScheduled")["status"] == "True"
    await _check(ref, "12-60", *CONDITION)
    assert ref.cluster.scheduler.gang_cycles == {}, "a basic group has no pod-group cycle"


async def test_12_61_to_68_preallocated_claims_bring_the_gang_to_their_node(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-61", "spec", "status")
    claim = load("12-65")["response"]["body"]
    reply = await ref.call("POST", CLAIMS, {"metadata": {"name": "c-0"}, "spec": claim["spec"]})
    assert reply.status == 201
    await _check(ref, "12-62", "status")
    await _claim("c-1", "12-65", "12-62", device="gpu-1")(ref)
    await _check(ref, "12-63", "spec.resourceClaims", "status")
    await asyncio.sleep(0.3)
    await _check(ref, "12-64", "status")
    await _check(ref, "12-65", "status", "metadata.finalizers")
    claims = [{"name": "gpu", "resourceClaimName": "c-1"}]
    await _pod_like("12-63", "claim-1", resourceClaims=claims)(ref)
    nodes = await _bound_together(ref, "claim-0", "claim-1")
    assert set(nodes.values()) == {"gpu-1"}
    for case in ("12-66a", "12-66b"):
        await _check(ref, case, "spec.nodeName", "spec.resourceClaims")
    await _check(
        ref,
        "12-67",
        "status.allocation",
        "metadata.finalizers",
        *(f"status.reservedFor.0.{key}" for key in ("resource", "name")),
    )
    await _check(ref, "12-68", *CONDITION)


async def test_12_69_to_75_a_podgroup_claim_is_reserved_for_the_group(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _shared_claim(ref)
    await _check(ref, "12-69", "spec", "status")
    await _check(ref, "12-70", "spec.resourceClaims", "status")
    await _pod_like("12-70", "shared-1")(ref)
    for name in ("shared-0", "shared-1"):
        await _bound(name)(ref)
    await _check(ref, "12-71", "spec.nodeName")
    claim = await _check(ref, "12-72", "status.allocation")
    group = (await ref.call("GET", f"{GROUPS}/pg-shared")).body
    expected = load("12-72")["response"]["body"]["status"]["reservedFor"]
    assert claim["status"]["reservedFor"] == [dict(expected[0], uid=group["metadata"]["uid"])]
    await _check(ref, "12-73", "spec.resourceClaims", *CONDITION)
    refused = [
        name
        for name in ("shared-0", "shared-1")
        if any(
            e["reason"] == "FailedScheduling" for e in (await _events_of(ref, name)).body["items"]
        )
    ]
    assert len(refused) == 1, "one member's PreBind hits the duplicate reservation"

    async def of_the_refused_pod(_: Replay, request: dict[str, Any]) -> None:
        selector = f"involvedObject.name={refused[0]},involvedObject.kind=Pod"
        request["query"]["fieldSelector"] = selector

    events = (await run(ref, Case("12-74", rewrite=of_the_refused_pod))).body
    captured = load("12-74")["response"]["body"]
    for event in captured["items"]:
        event["message"] = event["message"].replace("pg-ref/shared-0", f"pg-ref/{refused[0]}")
    assert _summary(events) == _summary(captured)
    await _check(ref, "12-75", "spec.nodeName", "status.phase")


async def test_12_76_to_85_schedulinggroup_is_validated_immutable_and_bypassed_by_nodename(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-76", "spec", "status")
    await _check(ref, "12-77", "spec.schedulingGroup", "spec.schedulingGates")
    for name in ("12-78", "12-79", "12-80", "12-81"):
        if name == "12-80":
            await _check(ref, name, "spec.schedulingGates", "spec.schedulingGroup", *CONDITION)
            continue
        body = await _check(ref, name, message=False)
        expected = load(name)["response"]["body"]
        assert body["message"] == expected["message"].split("\n@@")[0]
        assert (
            body["details"]["causes"][0]["message"]
            == (expected["details"]["causes"][0]["message"].split("\n@@")[0])
        )
    await _check(ref, "12-82")
    await _check(ref, "12-83")
    await _check(ref, "12-84", "spec.nodeName", "spec.schedulingGroup", "status")
    await _phase("direct-0", "Running")(ref)
    await _check(ref, "12-85", "spec.nodeName", "status.phase")
    assert _cycles(ref, "pg-big") == 0


async def test_12_95_to_97_lists_and_tables(gang_reference: Replay) -> None:
    ref = gang_reference
    groups = ("12-09", "12-76", "12-61", "12-33", "12-58", "12-69", *WORKLOAD, "12-12", "12-89")
    await _steps(ref, *groups)
    await _check(ref, "12-95", names=True)


async def test_12_96_podgroup_table_has_policy_workload_and_status(gang_reference: Replay) -> None:
    ref = gang_reference
    await _steps(ref, *WORKLOAD, "12-12", "12-89", "12-76", "12-91", "12-55", "12-58")
    await until(f"{GROUPS}/pg-late", lambda r: bool(r.body["status"].get("conditions")))(ref)
    table = await _check(ref, "12-96")
    expected = load("12-96")["response"]["body"]
    assert table["columnDefinitions"] == expected["columnDefinitions"]
    rows = {row["cells"][0]: row["cells"][:4] for row in table["rows"]}
    captured = {row["cells"][0]: row["cells"][:4] for row in expected["rows"]}
    assert rows == {name: captured[name] for name in ("pg-big", "pg-late", "pg-w", "pg-w5")}


async def test_12_97_workload_table_has_name_and_age(gang_reference: Replay) -> None:
    ref = gang_reference
    await _steps(ref, "12-92")
    table = await _check(ref, "12-97")
    expected = load("12-97")["response"]["body"]
    assert table["columnDefinitions"] == expected["columnDefinitions"]
    assert [row["cells"][0] for row in table["rows"]] == ["wl-job"]


async def test_12_98_to_105_finished_members_do_not_count(gang_reference: Replay) -> None:
    ref = gang_reference
    finished = [f"done-{n}" for n in range(2)]
    group = {"podGroupName": "pg-claim"}
    await _steps(
        ref,
        "12-61",
        *(_pod_like("12-16", name, run="0.2", schedulingGroup=group) for name in finished),
        *(_phase(name, "Succeeded") for name in finished),
    )
    await _check(ref, "12-98", "spec.schedulingGroup", "status")
    await asyncio.sleep(0.3)
    await _check(ref, "12-99", "status")
    await _steps(
        ref,
        "12-33",
        _pod_like("12-34", "gated-0", schedulingGates=None),
        _pod_like("12-34", "gated-1", run="0.2", schedulingGates=None),
        _phase("gated-1", "Succeeded"),
        _delete("gated-0"),
        _gone(f"{PODS}/gated-0"),
    )
    await _check(ref, "12-100", "spec.schedulingGroup", "status")
    await asyncio.sleep(0.3)
    await _check(ref, "12-101", "status")
    await _check(ref, "12-102", *CONDITION)
    gang = [f"pg-a-{n}" for n in range(3)]
    await _steps(
        ref,
        "12-09",
        *(_pod_like("12-16", name, run="0.2") for name in gang),
        *(_phase(name, "Succeeded") for name in gang),
    )
    await _check(ref, "12-103", "metadata.finalizers", "metadata.deletionGracePeriodSeconds")
    await _gone(f"{GROUPS}/pg-a")(ref)
    await _check(ref, "12-104")
    await _check(ref, "12-105", "spec.schedulingGroup", "status.phase")


async def test_12_106_to_112_late_joiners_of_a_running_gang_bind_alone(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-106", "spec", "status")
    members = ("run-0", "run-1")
    await _steps(ref, *(_pod_like("12-107", name) for name in members))
    await _bound_together(ref, *members)
    await _steps(ref, *(_phase(name, "Running") for name in members))
    await _check(ref, "12-107", "spec.schedulingGroup", "status")
    await _bound("run-2")(ref)
    pod = await _check(ref, "12-108", "spec.schedulingGroup")
    assert _condition(pod, "PodScheduled")["status"] == "True"
    await _check(ref, "12-109", "metadata.deletionGracePeriodSeconds", "status.phase")
    await _check(ref, "12-110", "spec.schedulingGroup", "status")
    await _bound("run-3")(ref)
    pod = await _check(ref, "12-111", "spec.schedulingGroup")
    assert _condition(pod, "PodScheduled")["status"] == "True"
    await _check(ref, "12-112", *CONDITION)
    assert _cycles(ref, "pg-run") == 3


async def test_12_117_to_120_a_gang_over_a_nodes_cpu_is_retried_without_writes(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _check(ref, "12-117", "spec", "status")
    shown = load("12-118")["response"]["body"]["spec"]
    for name in ("cpu-0", "cpu-1"):
        await _pod_like(
            "12-16",
            name,
            schedulingGroup=shown["schedulingGroup"],
            affinity=shown["affinity"],
            containers=[
                {key: shown["containers"][0][key] for key in ("name", "image", "resources")}
            ],
        )(ref)
    for name in ("cpu-0", "cpu-1"):
        await _told(name)(ref)
        await _events(name, 2)(ref)
    pods = await _all_pods(ref)
    waiting = [name for name, pod in pods.items() if _said(pod)[2] == WAITING]
    assert len(waiting) == 1, "one member placed, the other failed Filter"

    pod = pods[waiting[0]]
    expected = load("12-118")["response"]["body"]
    assert "nodeName" not in pod["spec"]
    assert _at(pod, POD_CONDITION) == _at(expected, POD_CONDITION)
    assert pod["status"]["phase"] == expected["status"]["phase"]
    await _check(ref, "12-119", *CONDITION)

    async def its_events(_: Replay, request: dict[str, Any]) -> None:
        selector = f"involvedObject.name={waiting[0]},involvedObject.kind=Pod"
        request["query"]["fieldSelector"] = selector

    events = (await run(ref, Case("12-120", rewrite=its_events))).body
    assert _summary(events) == _summary(load("12-120")["response"]["body"])


async def test_12_121_namespace_deletion_takes_the_podgroups_with_it(
    gang_reference: Replay,
) -> None:
    ref = gang_reference
    await _steps(ref, "12-09", "12-16", "12-33", "12-34")
    await _check(ref, "12-121", "status.phase")
    await _gone("/api/v1/namespaces/pg-ref")(ref)
