"""Issue item 10: injected 409/429/500 failures, dropped watches and delayed responses."""

from __future__ import annotations

import asyncio
import time

import pytest
from kubernetes_asyncio import client

from gangq.queue.kubesim.emulator import Emulator

from .conftest import Http, pod, wait_until

PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize(
    ("code", "reason"), [(409, "Conflict"), (429, "TooManyRequests"), (500, "InternalError")]
)
async def test_the_next_n_matching_requests_fail(
    cluster: Emulator, http: Http, code: int, reason: str
) -> None:
    cluster.faults.fail_next(2, code=code, verb="create", resource="pods")
    for _ in range(2):
        status, body, _ = await http.request("POST", PODS, pod("f"))
        assert (status, body["reason"]) == (code, reason)
    status, _, _ = await http.request("GET", PODS)
    assert status == 200
    status, _, _ = await http.request("POST", PODS, pod("f"))
    assert status == 201
    assert cluster.faults.injected == 2


async def test_429_carries_retry_after(cluster: Emulator, api: client.ApiClient) -> None:
    cluster.faults.fail_next(1, code=429, verb="list")
    with pytest.raises(client.ApiException) as error:
        await client.CoreV1Api(api).list_namespaced_pod("default")
    assert error.value.status == 429 and error.value.headers["Retry-After"] == "1"


async def test_dropped_watches_end_their_streams(cluster: Emulator, http: Http) -> None:
    watching = asyncio.create_task(http.watch(PODS, {"timeoutSeconds": "30"}))
    await wait_until(cluster.registry.storage.subscriptions)
    cluster.drop_watches()
    assert await asyncio.wait_for(watching, timeout=5) == []


async def test_responses_can_be_delayed(cluster: Emulator, http: Http) -> None:
    cluster.faults.delay(0.2, verb="get", resource="nodes")
    started = time.monotonic()
    status, _, _ = await http.request("GET", "/api/v1/nodes/gpu-0")
    assert status == 200 and time.monotonic() - started >= 0.2
    cluster.faults.clear()
