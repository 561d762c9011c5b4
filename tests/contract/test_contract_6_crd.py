"""Corpus section 6: the captured TrainingJob CRD, its validation, defaults, status and Tables."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .conftest import Case, Replay, load, run

TRAINING = "/apis/gangq.dev/v1alpha1/namespaces/ref/trainingjobs"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.gangq.dev"


async def _established(reference: Replay) -> None:
    for _ in range(300):
        reply = await reference.call("GET", CRD)
        conditions = (reply.body.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("CRD never established")


INSTALLED = ("6-01", _established)
JOB = (*INSTALLED, "6-06")
LABELLED = (*JOB, "6-19", "6-20")
WITH_STATUS = (*LABELLED, "6-24")
SPEC = ("spec",)

SECTION_6 = [
    Case(
        "6-01",
        paths=("status.conditions", "status.acceptedNames", "status.storedVersions", "spec.names"),
    ),
    Case(
        "6-02",
        setup=INSTALLED,
        paths=("status.conditions.0.type", "status.conditions.1.type", "status.acceptedNames"),
    ),
    Case("6-05", setup=INSTALLED, paths=("name", "versions", "preferredVersion")),
    Case("6-06", setup=INSTALLED, paths=SPEC),
    Case("6-07", setup=INSTALLED, paths=SPEC),
    Case("6-08", setup=INSTALLED),
    Case("6-09", setup=INSTALLED),
    Case("6-10", setup=INSTALLED),
    Case("6-11", setup=INSTALLED),
    Case("6-12", setup=INSTALLED),
    Case("6-13", setup=INSTALLED),
    Case("6-14", setup=INSTALLED),
    Case("6-15", setup=INSTALLED),
    Case("6-16", setup=INSTALLED),
    Case("6-17", setup=INSTALLED),
    Case("6-18", setup=INSTALLED),
    Case("6-19", setup=JOB, paths=("status", "metadata.labels")),
    Case("6-20", setup=(*JOB, "6-19"), paths=("spec.replicas", "metadata.generation")),
    Case("6-21", setup=LABELLED),
    Case("6-22", setup=LABELLED),
    Case("6-23", setup=LABELLED),
    Case("6-24", setup=LABELLED, paths=("status", "metadata.generation")),
    Case(
        "6-25",
        setup=WITH_STATUS,
        paths=("spec.replicas", "metadata.labels", "status.queuePosition"),
    ),
    Case("6-26", setup=WITH_STATUS),
    Case("6-27", setup=WITH_STATUS),
    Case("6-28", setup=WITH_STATUS, paths=("status.conditions.0.type", "status.conditions.1.type")),
    Case("6-32", setup=INSTALLED),
    Case("6-34", setup=INSTALLED),
    Case("6-35", setup=LABELLED, names=True),
    Case("6-36", setup=INSTALLED),
]


@pytest.mark.parametrize("case", SECTION_6, ids=str)
async def test_section_6_custom_resources(reference: Replay, case: Case) -> None:
    await run(reference, case)


async def test_section_6_discovery_of_the_installed_group(reference: Replay) -> None:
    for step in INSTALLED:
        await (reference.replay(step) if isinstance(step, str) else step(reference))
    reply = await reference.replay("6-04")
    expected = load("6-04")["response"]["body"]
    assert {
        r["name"]: (r["kind"], r.get("shortNames"), r.get("categories"), r["namespaced"])
        for r in reply.body["resources"]
    } == {
        r["name"]: (r["kind"], r.get("shortNames"), r.get("categories"), r["namespaced"])
        for r in expected["resources"]
    }
    aggregated = await reference.replay("6-37")
    ours = next(
        item for item in aggregated.body["items"] if item["metadata"]["name"] == "gangq.dev"
    )
    theirs = load("6-37")["response"]["body"]["items"][0]
    keys = (
        "resource",
        "responseKind",
        "scope",
        "singularResource",
        "shortNames",
        "categories",
        "subresources",
    )
    ours_resource, theirs_resource = (
        ours["versions"][0]["resources"][0],
        theirs["versions"][0]["resources"][0],
    )
    assert {k: ours_resource.get(k) for k in keys} == {k: theirs_resource.get(k) for k in keys}
    assert sorted(ours_resource["verbs"]) == sorted(theirs_resource["verbs"])


async def _jobs_of_the_capture(reference: Replay) -> None:
    """6-29 listed three jobs; create the two the corpus does not show being created."""
    for step in (*WITH_STATUS, "6-25", "6-07", "6-12"):
        await (reference.replay(step) if isinstance(step, str) else step(reference))
    row = load("6-29")["response"]["body"]["rows"][1]["cells"]
    job = {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": row[0]},
        "spec": {"tier": row[1], "replicas": row[2], "devicesPerReplica": row[3], "template": {}},
    }
    await reference.call("POST", TRAINING, job)
    await reference.call(
        "PATCH",
        f"{TRAINING}/{row[0]}/status",
        {"status": {"phase": row[4], "queuePosition": row[5], "reason": row[6]}},
        content_type="application/merge-patch+json",
    )


def _table(body: dict[str, Any]) -> tuple[Any, ...]:
    columns = body["columnDefinitions"]
    rows = [row["cells"][:-1] for row in body["rows"]]
    objects = [None if row.get("object") is None else row["object"]["kind"] for row in body["rows"]]
    return columns, rows, objects


async def test_section_6_tables_and_lists(reference: Replay) -> None:
    await _jobs_of_the_capture(reference)
    for name in ("6-29", "6-30"):
        reply = await reference.replay(name)
        assert reply.status == 200
        assert _table(reply.body) == _table(load(name)["response"]["body"])
        assert all(
            isinstance(row["cells"][-1], str) and row["cells"][-1].endswith("s")
            for row in reply.body["rows"]
        )
    listed = await reference.replay("6-31")
    expected = load("6-31")["response"]["body"]
    assert sorted(listed.body["metadata"]) == sorted(expected["metadata"])
    assert [i["metadata"]["name"] for i in listed.body["items"]] == [
        i["metadata"]["name"] for i in expected["items"]
    ]
    assert all(item["kind"] == "TrainingJob" for item in listed.body["items"])
    everywhere = await reference.replay("6-33")
    assert [i["metadata"]["name"] for i in everywhere.body["items"]] == [
        i["metadata"]["name"] for i in load("6-33")["response"]["body"]["items"]
    ]


async def test_section_6_crd_deletion_removes_the_resource(reference: Replay) -> None:
    for step in JOB:
        await (reference.replay(step) if isinstance(step, str) else step(reference))
    reply = await reference.replay("6-38")
    expected = load("6-38")["response"]
    assert reply.status == expected["status"]
    assert reply.body["metadata"]["finalizers"] == expected["body"]["metadata"]["finalizers"]
    assert reply.body["metadata"].get("deletionTimestamp")
    for _ in range(300):
        if (await reference.call("GET", CRD)).status == 404:
            break
        await asyncio.sleep(0.01)
    assert (await reference.call("GET", TRAINING)).status == 404
