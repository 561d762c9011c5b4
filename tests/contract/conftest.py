"""Replay of the real kube-apiserver v1.36.2 corpus against the emulator.

Each case sends a captured request (after the setup steps it depends on) to a fresh emulator
seeded like the captured cluster (nodes node-a/node-b, DeviceClass and ResourceSlices of
driver gpu.example.com, namespace ref) and compares the answer's shape with the captured one:
status code; for Status bodies kind, reason, code, message, details keys and causes; for
objects kind, apiVersion, the metadata fields present and any case-specific paths.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.emulator import Emulator

CORPUS = Path(__file__).resolve().parent / "reference"
"""The repository's copy of the corpus (tests/contract/test_contract_corpus.py keeps it true)."""
TOKEN = "reference-token"
READY_SECONDS = 0.3
"""The captured fake kubelet took a moment to start pods; reads right after binding see Pending."""
COMPARED_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
    "ownerReferences",
    "labels",
    "generateName",
)
"""Metadata fields whose presence must match (managedFields and annotations are not modelled)."""


def load(name: str) -> dict[str, Any]:
    matches = sorted(CORPUS.glob(f"{name}*.json"))
    assert matches, f"no corpus file for {name}"
    return dict(json.loads(matches[0].read_text()))


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any
    headers: Any


Step = str | Callable[["Replay"], Awaitable[Any]]


@dataclass(frozen=True)
class Case:
    """One corpus file; `setup` replays earlier cases (by name) or runs functions first."""

    name: str
    setup: Sequence[Step] = ()
    paths: Sequence[str] = ()
    """Dotted paths compared by value (or by presence when the value is run-specific)."""
    message: bool = True
    """Compare Status messages exactly; False compares everything up to the first ': '."""
    names: bool = False
    """Compare the names of listed items."""
    rewrite: Callable[[Replay, dict[str, Any]], Awaitable[None]] | None = None

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class Replay:
    cluster: Emulator
    session: aiohttp.ClientSession
    results: dict[str, Reply] = field(default_factory=dict)

    async def send(self, request: dict[str, Any], *, token: str = TOKEN) -> Reply:
        """`request` with the admin token, or as whoever `token` authenticates."""
        headers = {"Authorization": f"Bearer {token}"}
        for key in ("content-type", "accept"):
            if key in request["headers"]:
                headers[key.title()] = request["headers"][key]
        body = request["body"]
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        url = self.cluster.base_url + request["path"]
        async with self.session.request(
            request["method"], url, params=request["query"], data=data, headers=headers
        ) as response:
            if request["query"].get("watch") in ("1", "true") and response.status == 200:
                lines = [json.loads(line) async for line in response.content if line.strip()]
                return Reply(response.status, lines, response.headers)
            text = await response.text()
            try:
                parsed: Any = json.loads(text) if text else None
            except json.JSONDecodeError:
                parsed = text
            return Reply(response.status, parsed, response.headers)

    async def replay(
        self,
        name: str,
        *,
        rewrite: Callable[[Replay, dict[str, Any]], Awaitable[None]] | None = None,
        token: str = TOKEN,
    ) -> Reply:
        case = load(name)
        request = copy.deepcopy(case["request"])
        await _current_versions(self, request, stale=case["response"]["status"] == 409)
        if rewrite is not None:
            await rewrite(self, request)
        reply = await self.send(request, token=token)
        self.results[name] = reply
        return reply

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> Reply:
        return await self.send(
            {
                "method": method,
                "path": path,
                "query": query or {},
                "headers": {"content-type": content_type},
                "body": body,
            }
        )


async def _current_versions(replay: Replay, request: dict[str, Any], *, stale: bool) -> None:
    """A captured PUT carries that run's uid and resourceVersion; use this run's, unless the
    case is about a stale version (then the captured one is stale here as well)."""
    body = request["body"]
    if request["method"] != "PUT" or not isinstance(body, dict):
        return
    current = await replay.send(
        {
            "method": "GET",
            "path": request["path"].removesuffix("/status"),
            "query": {},
            "headers": {},
            "body": None,
        }
    )
    if current.status != 200:
        return
    metadata = body.setdefault("metadata", {})
    metadata["uid"] = current.body["metadata"]["uid"]
    if metadata.get("resourceVersion") and not stale:
        metadata["resourceVersion"] = current.body["metadata"]["resourceVersion"]


def _seed(cluster: Emulator) -> None:
    registry = cluster.registry
    node = load("7-09")["response"]["body"]
    for name in ("node-a", "node-b"):
        body = copy.deepcopy(node)
        body["metadata"] = {
            "name": name,
            "labels": dict(node["metadata"]["labels"], **{"kubernetes.io/hostname": name}),
        }
        registry.create(kinds.NODES, "", body)
    registry.create(
        kinds.DEVICE_CLASSES,
        "",
        {"metadata": {"name": "gpu.example.com"}, "spec": load("5-01")["response"]["body"]["spec"]},
    )
    for item in load("5-02")["response"]["body"]["items"]:
        registry.create(
            kinds.RESOURCE_SLICES,
            "",
            {"metadata": {"name": item["metadata"]["name"]}, "spec": item["spec"]},
        )
    lease = load("7-08")["response"]["body"]
    owner = dict(
        lease["metadata"]["ownerReferences"][0],
        uid=registry.get(kinds.NODES, "", "node-a")["metadata"]["uid"],
    )
    body = {"metadata": {"name": "node-a", "ownerReferences": [owner]}, "spec": lease["spec"]}
    registry.create(kinds.LEASES, "kube-node-lease", body)


@pytest.fixture
async def reference() -> AsyncIterator[Replay]:
    async with Emulator(inventory=None, token=TOKEN, ready_seconds=READY_SECONDS) as cluster:
        _seed(cluster)
        async with aiohttp.ClientSession() as session:
            replay = Replay(cluster, session)
            created = await replay.replay("0-01")
            assert created.status == 201
            yield replay


GANG_NAMESPACE = "pg-ref"
GANG_NODES = Inventory(nodes=10)
"""Section 12's cluster: gpu-0..gpu-9, pools named after their nodes with devices gpu-0..gpu-7
of driver gpu.nvidia.com (claims c-0, shared, 12-62, 12-72), two of them tainted (the
FitError of 12-29b counts 2 nodes with untolerated taints)."""
GANG_TAINTED = ("gpu-8", "gpu-9")


@pytest.fixture
async def gang_reference() -> AsyncIterator[Replay]:
    """A fresh emulator with the gang scheduling gates on (section 12), seeded like the
    captured cluster, with its work namespace pg-ref."""
    async with Emulator(
        inventory=GANG_NODES, token=TOKEN, ready_seconds=READY_SECONDS, podgroups=True
    ) as cluster:
        registry = cluster.registry
        for name in GANG_TAINTED:
            taint = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
            node = registry.get(kinds.NODES, "", name)
            node["spec"]["taints"] = [taint]
            registry.update(kinds.NODES, "", name, node)
        labels = {"gangq.dev/admission-exempt": "true"}
        registry.create(
            kinds.NAMESPACES, "", {"metadata": {"name": GANG_NAMESPACE, "labels": labels}}
        )
        async with aiohttp.ClientSession() as session:
            yield Replay(cluster, session)


def until(path: str, check: Callable[[Any], bool]) -> Callable[[Replay], Awaitable[Any]]:
    """A setup step that polls GET `path` until `check` holds on the reply (controllers of
    the emulator act asynchronously, as a real cluster's do)."""

    async def wait(reference: Replay) -> None:
        for _ in range(500):
            reply = await reference.call("GET", path)
            if check(reply):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{path} never reached the expected state")

    return wait


async def eventually(check: Callable[[], Any], *, attempts: int = 500) -> None:
    """Poll in-process state until `check` holds (bounded; the emulator works asynchronously)."""
    for _ in range(attempts):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


def _value(body: Any, path: str) -> Any:
    current = body
    for part in path.split("."):
        if isinstance(current, list) and part.isdigit():
            current = current[int(part)] if int(part) < len(current) else None
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current


def _status_shape(body: dict[str, Any], *, message: bool) -> dict[str, Any]:
    details = body.get("details")
    shape = {key: body.get(key) for key in ("kind", "apiVersion", "status", "reason", "code")}
    shape["metadata"] = sorted(body.get("metadata") or {})
    text = str(body.get("message", ""))
    shape["message"] = text if message else text.split(": ", 1)[0]
    if details is None:
        shape["details"] = None
        return shape
    shape["details"] = sorted(details)
    shape["details.values"] = {
        k: details.get(k) for k in ("name", "group", "kind", "retryAfterSeconds")
    }
    causes = details.get("causes") or []
    shape["causes"] = [(c.get("field"), c.get("reason")) for c in causes]
    if message:
        shape["cause messages"] = [c.get("message") for c in causes]
    return shape


def _object_shape(body: dict[str, Any]) -> dict[str, Any]:
    metadata = body.get("metadata") or {}
    shape = {"kind": body.get("kind"), "apiVersion": body.get("apiVersion")}
    shape["metadata"] = sorted(key for key in metadata if key in COMPARED_METADATA)
    for key in (
        "name",
        "namespace",
        "generation",
        "finalizers",
        "labels",
        "deletionGracePeriodSeconds",
    ):
        shape[f"metadata.{key}"] = metadata.get(key)
    shape["top-level"] = sorted(key for key in body if key != "metadata")
    return shape


def assert_same_shape(case: Case, expected: dict[str, Any], actual: Reply) -> None:
    response = expected["response"]
    assert actual.status == response["status"], f"{case}: {actual.status} {actual.body!r}"[:2000]
    body = response["body"]
    if isinstance(body, str) or body is None:
        assert actual.body == body
        return
    if isinstance(body, list):
        return
    if body.get("kind") == "Status":
        assert _status_shape(actual.body, message=case.message) == _status_shape(
            body, message=case.message
        )
    elif "items" in body:
        assert (actual.body["kind"], actual.body["apiVersion"]) == (
            body["kind"],
            body["apiVersion"],
        )
        assert sorted(actual.body["metadata"]) == sorted(body["metadata"])
        if case.names:
            assert [i["metadata"]["name"] for i in actual.body["items"]] == [
                i["metadata"]["name"] for i in body["items"]
            ]
    elif "kind" in body and "metadata" in body:
        assert _object_shape(actual.body) == _object_shape(body)
    for path in case.paths:
        assert _value(actual.body, path) == _value(body, path), path
    warnings = response["headers"].get("warning")
    if warnings is not None:
        expected_warnings = warnings if isinstance(warnings, list) else [warnings]
        assert sorted(actual.headers.getall("Warning", [])) == sorted(expected_warnings)


async def run(reference: Replay, case: Case) -> Reply:
    for step in case.setup:
        if isinstance(step, str):
            await reference.replay(step)
        else:
            await step(reference)
    expected = load(case.name)
    actual = await reference.replay(case.name, rewrite=case.rewrite)
    assert_same_shape(case, expected, actual)
    return actual
