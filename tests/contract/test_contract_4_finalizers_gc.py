"""Corpus section 4: finalizers, deletion and garbage collection through ownerReferences."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from .conftest import Case, Replay, load, run

MAPS = "/api/v1/namespaces/ref/configmaps"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ref/resourceclaims"


def _map(name: str, *finalizers: str) -> Callable[[Replay], Awaitable[Any]]:
    async def create(reference: Replay) -> None:
        metadata: dict[str, Any] = {"name": name}
        if finalizers:
            metadata["finalizers"] = list(finalizers)
        reply = await reference.call("POST", MAPS, {"metadata": metadata, "data": {"k": "v"}})
        assert reply.status == 201, reply.body

    return create


def _dependent(name: str, owner: str) -> Callable[[Replay], Awaitable[Any]]:
    """A claim owned by the ConfigMap `owner` of this run (shaped like the captured 4-12)."""

    async def create(reference: Replay) -> None:
        body = copy.deepcopy(load("4-12")["request"]["body"])
        parent = (await reference.call("GET", f"{MAPS}/{owner}")).body
        body["metadata"]["name"] = name
        body["metadata"]["ownerReferences"][0].update(name=owner, uid=parent["metadata"]["uid"])
        reply = await reference.call("POST", CLAIMS, body)
        assert reply.status == 201, reply.body

    return create


async def _owner_of_this_run(reference: Replay, request: dict[str, Any]) -> None:
    reference_name = request["body"]["metadata"]["ownerReferences"][0]["name"]
    parent = (await reference.call("GET", f"{MAPS}/{reference_name}")).body
    request["body"]["metadata"]["ownerReferences"][0]["uid"] = parent["metadata"]["uid"]


def _gone(path: str) -> Callable[[Replay], Awaitable[Any]]:
    async def wait(reference: Replay) -> None:
        for _ in range(300):
            if (await reference.call("GET", path)).status == 404:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{path} still exists")

    return wait


async def _orphaned(reference: Replay) -> None:
    for _ in range(300):
        claim = (await reference.call("GET", f"{CLAIMS}/owned-orphan")).body
        if "ownerReferences" not in claim["metadata"]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("dependent never orphaned")


TERMINATING = ("4-01", "4-02")
SECTION_4 = [
    Case("4-01", paths=("metadata.finalizers",)),
    Case("4-02", setup=("4-01",), paths=("metadata.deletionGracePeriodSeconds",)),
    Case("4-03", setup=TERMINATING),
    Case("4-04", setup=TERMINATING),
    Case("4-05", setup=TERMINATING, paths=("data",)),
    Case("4-06", setup=TERMINATING, paths=("metadata.deletionGracePeriodSeconds",)),
    Case("4-07", setup=TERMINATING),
    Case("4-08", setup=TERMINATING),
    Case("4-09", setup=(*TERMINATING, "4-08")),
    Case("4-10", setup=(_map("plain"),)),
    Case("4-11", setup=(_map("fin2", "gangq.dev/cleanup"),)),
    Case(
        "4-12",
        setup=(_map("owner-bg"),),
        rewrite=_owner_of_this_run,
        paths=("metadata.ownerReferences.0.controller",),
    ),
    Case("4-13", setup=(_map("owner-bg"), _dependent("owned-bg", "owner-bg"))),
    Case(
        "4-14",
        setup=(
            _map("owner-bg"),
            _dependent("owned-bg", "owner-bg"),
            "4-13",
            _gone(f"{CLAIMS}/owned-bg"),
        ),
    ),
    Case("4-15", setup=(_map("owner-fg"), _dependent("owned-fg", "owner-fg"))),
    Case(
        "4-16",
        setup=(
            _map("owner-fg"),
            _dependent("owned-fg", "owner-fg"),
            "4-15",
            _gone(f"{MAPS}/owner-fg"),
        ),
    ),
    Case("4-17", setup=(_map("owner-orphan"), _dependent("owned-orphan", "owner-orphan"))),
    Case(
        "4-18",
        setup=(_map("owner-orphan"), _dependent("owned-orphan", "owner-orphan"), "4-17", _orphaned),
    ),
    Case("4-19", setup=(_map("owner-od"), _dependent("owned-od", "owner-od"))),
    Case("4-20", setup=(_map("owner-real"),)),
    Case("4-21"),
    Case("4-22", message=False),
]


@pytest.mark.parametrize("case", SECTION_4, ids=str)
async def test_section_4_finalizers_and_gc(reference: Replay, case: Case) -> None:
    await run(reference, case)


async def test_section_4_dangling_owner_uid_is_collected(reference: Replay) -> None:
    """4-20's note: the GC deletes a dependent whose owner uid does not exist."""
    await _map("owner-real")(reference)
    assert (await reference.replay("4-20")).status == 201
    await _gone(f"{CLAIMS}/owned-dangling")(reference)
