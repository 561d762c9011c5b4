"""The demo's observers against the emulator over HTTP: list, watch, reconnect, deletions."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo.watcher import Watcher
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.emulator import Emulator


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, client.ApiClient]]:
    async with (
        Emulator(inventory=Inventory(nodes=2, racks=1), scheduling=False) as cluster,
        client.ApiClient(cluster.configuration()) as api_client,
    ):
        yield cluster, api_client


def config_map(name: str, value: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"value": value}}


class Seen:
    """The events a watcher reported, as (type, name, data.value), with a wake-up per event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []
        self.changed = asyncio.Event()

    def __call__(self, kind: str, kind_of_event: str, obj: dict[str, Any]) -> None:
        value = (obj.get("data") or {}).get("value")
        self.events.append((kind_of_event, obj["metadata"]["name"], value))
        self.changed.set()

    async def until(self, event: tuple[str, str, str]) -> None:
        async with asyncio.timeout(5):
            while event not in self.events:
                self.changed.clear()
                await self.changed.wait()


async def test_list_then_watch_reports_every_change_in_order(
    api: tuple[Emulator, client.ApiClient],
) -> None:
    cluster, api_client = api
    core = client.CoreV1Api(api_client)
    await core.create_namespaced_config_map("default", config_map("before", "1"))
    seen = Seen()
    watcher = Watcher(
        "configmaps", functools.partial(core.list_namespaced_config_map, "default"), seen
    )
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait_for(watcher.synced.wait(), 5)
        assert ("ADDED", "before", "1") in seen.events
        await core.create_namespaced_config_map("default", config_map("after", "2"))
        await core.patch_namespaced_config_map("after", "default", {"data": {"value": "3"}})
        await core.delete_namespaced_config_map("before", "default")
        await seen.until(("DELETED", "before", "1"))
        cluster.drop_watches()
        await core.patch_namespaced_config_map("after", "default", {"data": {"value": "4"}})
        await seen.until(("MODIFIED", "after", "4"))
        live = [event for event in seen.events if event[1] == "after"]
        assert live == [
            ("ADDED", "after", "2"),
            ("MODIFIED", "after", "3"),
            ("MODIFIED", "after", "4"),
        ]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_slices_give_every_gpu_an_identity(api: tuple[Emulator, client.ApiClient]) -> None:
    _, api_client = api
    observed = ledger_module.Ledger({"gpu.nvidia.com": "uuid"})
    watcher = Watcher(
        ledger_module.SLICES,
        client.ResourceV1Api(api_client).list_resource_slice,
        lambda kind, event, obj: observed.on_event(kind, event, obj, at=0.0),
    )
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait_for(watcher.synced.wait(), 5)
        identities = observed.devices.identity
        assert len(identities) == 16
        assert len(set(identities.values())) == 16
        assert all(value.startswith("GPU-") for value in identities.values())
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
