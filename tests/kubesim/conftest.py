"""An emulated cluster per test, reached over HTTP through kubernetes-asyncio."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.emulator import Emulator

CRD = Path(__file__).resolve().parents[2] / "crds" / "trainingjob.yaml"
SMALL = Inventory(nodes=2, gpus_per_node=8, racks=2)


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with Emulator(inventory=SMALL, crds=(CRD,)) as emulator:
        yield emulator


@pytest.fixture
async def api(cluster: Emulator) -> AsyncIterator[client.ApiClient]:
    async with client.ApiClient(cluster.configuration()) as api_client:
        yield api_client


class Http:
    """Plain HTTP against the emulator, for what typed clients hide (headers, raw bodies)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any, Any]:
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        sent = {"Content-Type": content_type, **(headers or {})}
        async with self.session.request(
            method, self.base + path, data=data, headers=sent, params=params
        ) as response:
            text = await response.text()
            try:
                parsed: Any = json.loads(text)
            except json.JSONDecodeError:
                parsed = text
            return response.status, parsed, response.headers

    async def watch(self, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
        async with self.session.get(
            self.base + path, params={"watch": "true", **params}
        ) as response:
            assert response.status == 200
            return [json.loads(line) async for line in response.content if line.strip()]


@pytest.fixture
async def http(cluster: Emulator) -> AsyncIterator[Http]:
    headers = {"Authorization": f"Bearer {cluster.token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        yield Http(session, cluster.base_url)


async def wait_until(predicate: Callable[[], Any], *, seconds: float = 5.0) -> Any:
    """Poll the in-process state until the predicate holds (bounded, never a fixed sleep)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def pod(
    name: str, *, gates: tuple[str, ...] = (), claims: tuple[str, ...] = (), **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/x:1",
                    "resources": {"requests": {"cpu": "100m"}},
                }
            ],
            **spec,
        },
    }
    if gates:
        body["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
    if claims:
        body["spec"]["resourceClaims"] = [
            {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
        ]
    return body


def claim(
    name: str, *, count: int = 1, selectors: tuple[str, ...] = (), numa: bool = False
) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if numa:
        devices["constraints"] = [{"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/numa"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }
