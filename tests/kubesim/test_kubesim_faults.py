"""Issue item 10: injected 409/429/500 failures, dropped watches and delayed responses."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kubernetes_asyncio import client

from gangq.queue.kubesim import kinds
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


async def test_a_client_gone_mid_request_is_not_a_server_error(
    cluster: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A controller killed while sending a body: the emulator logs no error (a real server
    does not either), and keeps serving."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", cluster.port)
    writer.write(
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer " + str(cluster.token).encode() + b"\r\n"
        b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"metadata"'
    )
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.1)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert cluster.registry.get(kinds.NAMESPACES, "", "default")["metadata"]["name"] == "default"
