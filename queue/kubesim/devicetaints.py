"""The device taint eviction controller of kube-controller-manager.

Owns evicting pods that use a device with a `NoExecute` taint their claim's allocation does not
tolerate: at once, or `tolerationSeconds` after the taint's `timeAdded` when every matching
toleration bounds it. Like the real controller it marks the pod (a `DisruptionTarget`
condition), records a `DeviceTaintManagerEviction` event and deletes the pod; the claim keeps
its allocation and the resourceclaim controller (`claims.release`) empties `reservedFor` once
the pod is gone (corpus 10-35..10-37). Tolerations are read from the allocation results
(`results[].tolerations`), which is where the allocator copies the request's. It must not
change claims or slices itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gangq.queue.core import device as core_device
from gangq.queue.kubesim import deletion, filters, kinds, reacting, status
from gangq.queue.kubesim.allocation import DeviceKey
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.storage import Event
from gangq.queue.kubesim.validation import pods

COMPONENT = "device-taint-eviction-controller"
REASON = "DeviceTaintManagerEviction"
_RESYNC_SECONDS = 5.0
log = logging.getLogger(__name__)


def no_execute_taints(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, list[dict[str, Any]]]:
    """Published device -> its NoExecute taints."""
    found: dict[DeviceKey, list[dict[str, Any]]] = {}
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
        for raw in spec.get("devices") or []:
            taints = [
                t for t in raw.get("taints") or [] if t.get("effect") == core_device.NO_EXECUTE
            ]
            if taints:
                found[(driver, pool, str(raw.get("name")))] = taints
    return found


def _parse(text: Any, default: datetime) -> datetime:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return default


def eviction_time(
    results: Iterable[Mapping[str, Any]],
    taints: Mapping[DeviceKey, list[dict[str, Any]]],
    *,
    now: datetime,
) -> datetime | None:
    """When the first untolerated NoExecute taint on these allocated devices evicts, or None."""
    earliest: datetime | None = None
    for result in results:
        key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
        tolerations = list(result.get("tolerations") or [])
        for taint in taints.get(key, []):
            matching = [t for t in tolerations if filters.tolerates([t], taint)]
            if matching and any(t.get("tolerationSeconds") is None for t in matching):
                continue
            added = _parse(taint.get("timeAdded"), now)
            seconds = min((int(t["tolerationSeconds"]) for t in matching), default=0)
            when = added + timedelta(seconds=max(seconds, 0))
            earliest = when if earliest is None else min(earliest, when)
    return earliest


@dataclass(eq=False)
class DeviceTaintEviction:
    registry: Registry
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _next: datetime | None = None

    def _on_event(self, event: Event) -> None:
        if event.resource in (kinds.RESOURCE_CLAIMS.key, kinds.RESOURCE_SLICES.key):
            self._wake.set()

    async def run(self) -> None:
        await reacting.react(
            self.registry.storage,
            on_event=self._on_event,
            wake=self._wake,
            cycle=self.cycle,
            timeout_s=self._until_next,
        )

    def _until_next(self) -> float:
        """Seconds until the next timed eviction, at most the resync period."""
        if self._next is None:
            return _RESYNC_SECONDS
        left = (self._next - self.registry.clock()).total_seconds()
        return min(_RESYNC_SECONDS, max(left, 0.0))

    def cycle(self) -> None:
        """Evict every pod whose time has come; remember when the next one will."""
        storage = self.registry.storage
        taints = storage.derived(kinds.RESOURCE_SLICES.key, "no-execute-taints", no_execute_taints)
        self._next = None
        if not taints:
            return
        now = self.registry.clock()
        for claim in list(storage.items(kinds.RESOURCE_CLAIMS.key)):
            claim_status = claim.get("status") or {}
            reserved = claim_status.get("reservedFor") or []
            results = ((claim_status.get("allocation") or {}).get("devices") or {}).get("results")
            if not reserved or not results:
                continue
            when = eviction_time(results, taints, now=now)
            if when is None:
                continue
            if when > now:
                self._next = when if self._next is None else min(self._next, when)
                continue
            for entry in reserved:
                if entry.get("resource") == "pods":
                    self._evict(claim["metadata"]["namespace"], entry)

    def _evict(self, namespace: str, entry: Mapping[str, Any]) -> None:
        name = str(entry.get("name"))
        pod = self.registry.find(kinds.PODS, namespace, name)
        if pod is None or pod["metadata"].get("uid") != entry.get("uid"):
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        now = self.registry.now()
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
            "reason": "DeletionByDeviceTaintManager",
            "message": "Device Taint manager: deleting due to NoExecute taint",
        }
        pods.set_condition(pod, condition)
        try:
            self.registry.update(kinds.PODS, namespace, name, pod, subresource="status")
            self.registry.create(kinds.EVENTS, namespace, _event(pod, now))
            options = deletion.DeleteOptions(uid=str(pod["metadata"]["uid"]))
            deletion.delete(self.registry, kinds.PODS, namespace, name, options)
        except status.ApiError as error:
            log.debug("evicting %s/%s: %s", namespace, name, error.message)


def _event(pod: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The core/v1 Event the controller's recorder writes (corpus 10-35)."""
    metadata = pod["metadata"]
    return {
        "metadata": {"generateName": f"{metadata['name']}."},
        "involvedObject": {
            "kind": "Pod",
            "namespace": metadata["namespace"],
            "name": metadata["name"],
            "uid": metadata["uid"],
            "apiVersion": "v1",
        },
        "reason": REASON,
        "message": "Marking for deletion",
        "source": {"component": COMPONENT},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": "Normal",
        "eventTime": None,
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
    }
