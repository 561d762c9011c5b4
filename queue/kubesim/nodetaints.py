"""The taint eviction controller of kube-controller-manager (`taint-eviction-controller`).

Owns deleting the pods bound to a node with a `NoExecute` taint they do not tolerate: at once
when a taint has no matching toleration, else after the smallest `tolerationSeconds` of the
matching tolerations, counted from when the controller first saw the pod under those taints
(a toleration without `tolerationSeconds` keeps the pod for good). Like upstream
(pkg/controller/tainteviction) it evicts pods of every phase, records a Normal
`TaintManagerEviction` "Marking for deletion Pod <ns>/<name>" event, patches the pod's status
with a `DisruptionTarget` condition (reason `DeletionByTaintManager`, message "Taint manager:
deleting due to NoExecute taint") and deletes it with the pod's own grace period. The condition
names no taint: whoever wants to know which one reads the node. It must not change nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gangq.queue.kubesim import deletion, filters, kinds, reacting, status
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.storage import Event
from gangq.queue.kubesim.validation import pods

COMPONENT = "taint-eviction-controller"
REASON = "TaintManagerEviction"
CONDITION_REASON = "DeletionByTaintManager"
CONDITION_MESSAGE = "Taint manager: deleting due to NoExecute taint"
log = logging.getLogger(__name__)


def no_execute_taints(nodes: Iterator[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Node name -> its NoExecute taints, for the nodes that have any."""
    found: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") == "NoExecute"
        ]
        if taints:
            found[str(node["metadata"]["name"])] = taints
    return found


def toleration_seconds(
    tolerations: list[Mapping[str, Any]], taints: list[dict[str, Any]]
) -> float | None:
    """How long the pod may stay: 0 when a taint is not tolerated, None when every taint is
    tolerated for good (upstream `GetMatchingTolerations` and `getMinTolerationTime`)."""
    used: list[Mapping[str, Any]] = []
    for taint in taints:
        matching = [t for t in tolerations if filters.tolerates([t], taint)]
        if not matching:
            return 0.0
        used.extend(matching)
    bounded = [
        float(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None
    ]
    if not bounded:
        return None
    return max(min(bounded), 0.0)


@dataclass(eq=False)
class NodeTaintEviction:
    registry: Registry
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _seen: dict[str, datetime] = field(default_factory=dict)
    """Pod uid -> when its timed eviction was first scheduled (upstream's work `CreatedAt`)."""
    next_eviction: datetime | None = None
    """When the earliest timed eviction is due (None: none is)."""

    def _on_event(self, event: Event) -> None:
        if event.resource == kinds.NODES.key or (
            event.resource == kinds.PODS.key and (event.object.get("spec") or {}).get("nodeName")
        ):
            self._wake.set()

    async def run(self) -> None:
        await reacting.react(
            self.registry.storage,
            on_event=self._on_event,
            wake=self._wake,
            cycle=self.cycle,
            timeout_s=self._until_next,
        )

    def _until_next(self) -> float | None:
        if self.next_eviction is None:
            return None
        return max((self.next_eviction - self.registry.clock()).total_seconds(), 0.0)

    def cycle(self) -> None:
        """Evict every pod whose time has come; remember when the next one will."""
        storage = self.registry.storage
        tainted = storage.derived(kinds.NODES.key, "no-execute-taints", no_execute_taints)
        self.next_eviction = None
        scheduled: dict[str, datetime] = {}
        if tainted:
            now = self.registry.clock()
            for pod in list(storage.items(kinds.PODS.key)):
                taints = tainted.get(str((pod.get("spec") or {}).get("nodeName") or ""))
                metadata = pod["metadata"]
                if taints is None or metadata.get("deletionTimestamp"):
                    continue
                seconds = toleration_seconds(pod["spec"].get("tolerations") or [], taints)
                if seconds is None:
                    continue
                uid = str(metadata.get("uid"))
                since = scheduled[uid] = self._seen.get(uid, now)
                due = since + timedelta(seconds=seconds)
                if due <= now:
                    self._evict(metadata["namespace"], metadata["name"], uid)
                else:
                    self.next_eviction = (
                        due if self.next_eviction is None else min(self.next_eviction, due)
                    )
        self._seen = scheduled

    def _evict(self, namespace: str, name: str, uid: str) -> None:
        now = self.registry.now()
        try:
            self.registry.create(kinds.EVENTS, namespace, _event(namespace, name, now))
            pod = self.registry.get(kinds.PODS, namespace, name)
            pods.set_condition(
                pod,
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                    "reason": CONDITION_REASON,
                    "message": CONDITION_MESSAGE,
                },
            )
            self.registry.update(kinds.PODS, namespace, name, pod, subresource="status")
            deletion.delete(self.registry, kinds.PODS, namespace, name, deletion.DeleteOptions())
        except status.ApiError as error:
            log.debug("evicting %s/%s (%s): %s", namespace, name, uid, error.message)


def _event(namespace: str, name: str, now: str) -> dict[str, Any]:
    """The core/v1 Event the controller's recorder writes: its reference has no uid."""
    return {
        "metadata": {"generateName": f"{name}."},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": name, "apiVersion": "v1"},
        "reason": REASON,
        "message": f"Marking for deletion Pod {namespace}/{name}",
        "source": {"component": COMPONENT},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": "Normal",
        "eventTime": None,
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
    }
