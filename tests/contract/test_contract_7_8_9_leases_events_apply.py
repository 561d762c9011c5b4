"""Corpus sections 7 (Leases, Node), 8 (Events) and 9 (apply, dryRun, generateName, missing
namespace)."""

from __future__ import annotations

import pytest

from .conftest import Case, Replay, load, run

LEASED = ("7-01",)
SECTION_7 = [
    Case("7-01", paths=("spec",)),
    Case("7-02", setup=LEASED, paths=("spec",)),
    Case("7-03", setup=(*LEASED, "7-02")),
    Case("7-04", setup=LEASED),
    Case("7-05"),
    Case("7-06"),
    Case("7-06b"),
    Case("7-07", setup=LEASED, paths=("spec.renewTime", "spec.holderIdentity")),
    Case("7-08", paths=("spec.holderIdentity", "spec.leaseDurationSeconds")),
    Case(
        "7-09", paths=("status.allocatable", "status.capacity", "status.conditions.0.type", "spec")
    ),
]


@pytest.mark.parametrize("case", SECTION_7, ids=str)
async def test_section_7_leases_and_nodes(reference: Replay, case: Case) -> None:
    await run(reference, case)


EVENT_FIELDS = (
    "reason",
    "message",
    "type",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "reportingComponent",
    "reportingInstance",
    "count",
    "involvedObject",
)
SECTION_8 = [
    Case("8-01", paths=EVENT_FIELDS),
    Case("8-02", setup=("8-01",), paths=EVENT_FIELDS),
    Case("8-03"),
    Case("8-04"),
    Case("8-05", paths=EVENT_FIELDS),
    Case(
        "8-06",
        paths=(
            "regarding",
            "related",
            "note",
            "reportingController",
            "action",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "eventTime",
        ),
    ),
    Case("8-07", setup=("8-06",), paths=(*EVENT_FIELDS, "action", "related")),
    Case("8-08"),
    Case("8-09", setup=("8-01", "8-02", "8-05"), names=True),
]


@pytest.mark.parametrize("case", SECTION_8, ids=str)
async def test_section_8_events(reference: Replay, case: Case) -> None:
    await run(reference, case)


APPLIED = ("9-01",)
SECTION_9 = [
    Case("9-01", paths=("spec", "metadata.labels", "status")),
    Case("9-02", setup=APPLIED, paths=("spec", "metadata.labels")),
    Case("9-05", setup=APPLIED),
    Case(
        "9-06",
        paths=("spec.containers.0.name", "spec.containers.0.imagePullPolicy", "status.phase"),
    ),
    Case("9-07", setup=("9-06",)),
    Case("9-09"),
    Case("9-10"),
    Case("9-11"),
]


@pytest.mark.parametrize("case", SECTION_9, ids=str)
async def test_section_9_apply_dry_run_and_names(reference: Replay, case: Case) -> None:
    await run(reference, case)


async def test_section_9_reapply_keeps_the_resource_version(reference: Replay) -> None:
    first = await reference.replay("9-01")
    again = await reference.replay("9-02")
    assert again.body["metadata"]["resourceVersion"] == first.body["metadata"]["resourceVersion"]


async def test_section_9_dry_run_has_no_resource_version(reference: Replay) -> None:
    reply = await reference.replay("9-06")
    assert "resourceVersion" not in reply.body["metadata"]
    assert "resourceVersion" not in load("9-06")["response"]["body"]["metadata"]


async def test_section_9_generate_name(reference: Replay) -> None:
    reply = await reference.replay("9-08")
    expected = load("9-08")["response"]["body"]["metadata"]
    prefix = expected["generateName"]
    assert reply.body["metadata"]["generateName"] == prefix
    assert reply.body["metadata"]["name"].startswith(prefix)
    assert len(reply.body["metadata"]["name"]) == len(expected["name"])
