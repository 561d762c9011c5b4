"""Simulated kubelets: bound pods start, become Ready, run for a while and finish.

Owns pod lifecycle after binding: Running and Ready after `ready_seconds`; after the pod's
`sim.gangq.dev/run-seconds` the container exits with `sim.gangq.dev/exit-code` (and, when
set, `sim.gangq.dev/exit-reason` such as OOMKilled and `sim.gangq.dev/termination-message`,
as the container's terminated state would carry them): the pod ends
Succeeded or Failed, or restarts in place when its restartPolicy says so; what each container
run writes goes to `logs` (see `podlogs.py`); the downward-API files of a running pod that
show its annotations or labels are kept current, as a kubelet's sync does, and each container
that mounts one logs what changed in it (`gangq-podinfo/annotations: gangq.dev/size=2`),
never restarted for it; the grace-0 delete
that completes a graceful deletion; node failure (NotReady + taint, pods lose Ready) and device
taints written into ResourceSlices. It must not schedule or change specs.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.kubesim import deletion, kinds, reacting, status
from gangq.queue.kubesim.podlogs import PodLogs
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.storage import DELETED, Event
from gangq.queue.kubesim.validation import pods

RUN_SECONDS = "sim.gangq.dev/run-seconds"
EXIT_CODE = "sim.gangq.dev/exit-code"
EXIT_REASON = "sim.gangq.dev/exit-reason"
TERMINATION_MESSAGE = "sim.gangq.dev/termination-message"
log = logging.getLogger(__name__)
UNREACHABLE = "node.kubernetes.io/unreachable"
"""The taint key kube-controller-manager's node lifecycle controller gives a node whose Ready
condition went Unknown (its kubelet stopped posting status), with effect NoSchedule (as for
every condition) and NoExecute (which evicts after the pods' default 300 s toleration)."""


def _condition(kind: str, state: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": state, "lastProbeTime": None, "lastTransitionTime": now}


@dataclass(eq=False)
class Kubelets:
    registry: Registry
    ready_seconds: float = 0.0
    logs: PodLogs = field(default_factory=PodLogs)
    """What the containers write, served by the API server's `pods/{name}/log`."""
    _timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _dirty: set[tuple[str, str]] = field(default_factory=set)
    _files: dict[str, dict[tuple[str, str], dict[str, str]]] = field(default_factory=dict)
    """Pod uid -> the metadata each of its downward-API files shows, by (volume, path)."""
    _ip: int = 0

    def _on_event(self, event: Event) -> None:
        if event.resource != kinds.PODS.key:
            return
        metadata = event.object["metadata"]
        if event.type == DELETED:
            self.logs.forget(str(metadata.get("uid")))
            self._files.pop(str(metadata.get("uid")), None)
            timer = self._timers.pop(str(metadata.get("uid")), None)
            if timer is not None:
                timer.cancel()
            return
        if (event.object.get("spec") or {}).get("nodeName"):
            self._dirty.add((metadata.get("namespace") or "", metadata["name"]))
            self._wake.set()

    async def run(self) -> None:
        for pod in self.registry.storage.items(kinds.PODS.key):
            if (pod.get("spec") or {}).get("nodeName"):
                self._dirty.add((pod["metadata"].get("namespace") or "", pod["metadata"]["name"]))
        try:
            await reacting.react(
                self.registry.storage,
                on_event=self._on_event,
                wake=self._wake,
                cycle=self._sync_dirty,
            )
        finally:
            for timer in self._timers.values():
                timer.cancel()

    def _sync_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for namespace, name in sorted(dirty):
            try:
                self._sync(namespace, name)
            except status.ApiError as error:
                log.debug("kubelet sync of %s/%s: %s", namespace, name, error.message)

    def _later(self, uid: str, seconds: float, action: Any) -> None:
        if uid in self._timers:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.pop(uid, None)
            try:
                action()
            except status.ApiError:
                return

        self._timers[uid] = loop.call_later(max(seconds, 0.0), fire)

    def _sync(self, namespace: str, name: str) -> None:
        pod = self.registry.find(kinds.PODS, namespace, name)
        if pod is None:
            return
        uid = str(pod["metadata"]["uid"])
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp"):
            self._stop(pod)
            return
        node = self.registry.find(kinds.NODES, "", str(pod["spec"]["nodeName"]))
        if node is None or not _is_ready(node):
            return
        if phase == "Pending":
            self._later(uid, self.ready_seconds, lambda: self._start(namespace, name, uid))
        elif phase == "Running":
            self._refresh_files(pod)
            if RUN_SECONDS in (pod["metadata"].get("annotations") or {}):
                seconds = float(pod["metadata"]["annotations"][RUN_SECONDS])
                self._later(uid, seconds, lambda: self._finish(namespace, name, uid))

    def _refresh_files(self, pod: dict[str, Any]) -> None:
        """Bring the pod's downward-API files up to date with its metadata: the containers
        mounting one see the change (logged) and go on running, as with a real kubelet,
        which rewrites such files within its sync period and restarts no container."""
        uid = str(pod["metadata"]["uid"])
        shown, now = self._files.get(uid), _downward_files(pod)
        self._files[uid] = now
        if shown is None:
            return
        for (volume, path), values in now.items():
            before = shown.get((volume, path), {})
            lines = [
                f"{volume}/{path}: {key}={value}"
                for key, value in sorted(values.items())
                if before.get(key) != value
            ] + [f"{volume}/{path}: {key} removed" for key in sorted(set(before) - set(values))]
            if not lines:
                continue
            for container in pod["spec"].get("containers") or []:
                mounts = {m.get("name") for m in container.get("volumeMounts") or []}
                if volume in mounts:
                    self.logs.write(pod, str(container.get("name")), lines)

    def _stop(self, pod: dict[str, Any]) -> None:
        """Kill the containers (a status write), then remove the pod with grace 0 (corpus 3-24)."""
        metadata = pod["metadata"]
        namespace, name, uid = metadata["namespace"], metadata["name"], metadata["uid"]
        now = self.registry.now()
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if any("running" in (c.get("state") or {}) for c in statuses):
            for container in statuses:
                container["state"] = {
                    "terminated": {"exitCode": 137, "reason": "Error", "finishedAt": now}
                }
                container["ready"] = False
            for kind in ("ContainersReady", "Ready"):
                pods.set_condition(pod, _condition(kind, "False", now))
            self.registry.update(kinds.PODS, namespace, name, pod, subresource="status")
        options = deletion.DeleteOptions(grace_seconds=0, uid=uid)
        deletion.delete(self.registry, kinds.PODS, namespace, name, options)

    def _start(self, namespace: str, name: str, uid: str) -> None:
        pod = self.registry.find(kinds.PODS, namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["status"].get("phase") != "Pending":
            return
        now = self.registry.now()
        self._ip += 1
        pod_status = pod["status"]
        pod_status["phase"] = "Running"
        own = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        others = [c for c in pod_status.get("conditions") or [] if c.get("type") not in own]
        pod_status["conditions"] = [_condition(kind, "True", now) for kind in own] + others
        pod_status["hostIP"] = "127.0.0.1"
        pod_status["podIP"] = f"10.244.{self._ip // 250}.{self._ip % 250 + 2}"
        pod_status["podIPs"] = [{"ip": pod_status["podIP"]}]
        pod_status["startTime"] = now
        pod_status["containerStatuses"] = [
            {
                "name": c.get("name"),
                "state": {"running": {"startedAt": now}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": c.get("image"),
                "imageID": f"sim://{c.get('image')}",
                "containerID": f"sim://{uid}/{c.get('name')}",
                "started": True,
            }
            for c in pod["spec"].get("containers") or []
        ]
        self.registry.update(kinds.PODS, namespace, name, pod, subresource="status")
        self.logs.start(pod, restart=0)
        self._files[uid] = _downward_files(pod)

    def _finish(self, namespace: str, name: str, uid: str) -> None:
        pod = self.registry.find(kinds.PODS, namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["status"].get("phase") != "Running":
            return
        annotations = pod["metadata"].get("annotations") or {}
        text = str(annotations.get(EXIT_CODE, "0"))
        code = int(text) if text.lstrip("-").isdigit() else 1
        now = self.registry.now()
        reason = annotations.get(EXIT_REASON) or ("Completed" if code == 0 else "Error")
        state: dict[str, Any] = {"exitCode": code, "reason": reason, "finishedAt": now}
        if annotations.get(TERMINATION_MESSAGE):
            state["message"] = str(annotations[TERMINATION_MESSAGE])
        terminated = {"terminated": state}
        policy = pod["spec"].get("restartPolicy", "Always")
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            # The container restarts in place: the pod stays Running (and runs again).
            for container in pod["status"].get("containerStatuses") or []:
                container["lastState"] = terminated
                container["state"] = {"running": {"startedAt": now}}
                container["restartCount"] = int(container.get("restartCount") or 0) + 1
            self.registry.update(kinds.PODS, namespace, name, pod, subresource="status")
            statuses = pod["status"].get("containerStatuses") or [{}]
            self.logs.start(pod, restart=int(statuses[0].get("restartCount") or 0))
            return
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        for kind in ("ContainersReady", "Ready"):
            pods.set_condition(pod, _condition(kind, "False", now))
        for container in pod["status"].get("containerStatuses") or []:
            container["state"] = terminated
            container["ready"] = False
            container["started"] = False
        self.registry.update(kinds.PODS, namespace, name, pod, subresource="status")

    def fail_node(self, node_name: str) -> None:
        """The node stops reporting: Ready Unknown, tainted unreachable, and its pods lose Ready
        (what kube-controller-manager writes once the node's grace period has passed)."""
        node = self.registry.get(kinds.NODES, "", node_name)
        now = self.registry.now()
        for condition in node["status"].get("conditions") or []:
            if condition.get("type") == "Ready":
                condition.update(
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    message="Kubelet stopped posting node status.",
                    lastTransitionTime=now,
                )
        taints = node.setdefault("spec", {}).setdefault("taints", [])
        for effect in ("NoSchedule", "NoExecute"):
            if not any(t.get("key") == UNREACHABLE and t.get("effect") == effect for t in taints):
                taints.append({"key": UNREACHABLE, "effect": effect, "timeAdded": now})
        self.registry.update(kinds.NODES, "", node_name, node)
        self.registry.update(
            kinds.NODES, "", node_name, self._with_status(node_name, node), subresource="status"
        )
        for pod in list(self.registry.storage.items(kinds.PODS.key)):
            if (pod.get("spec") or {}).get("nodeName") == node_name and pod["status"].get(
                "phase"
            ) == "Running":
                current = self.registry.get(
                    kinds.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
                pods.set_condition(current, _condition("Ready", "False", now))
                self.registry.update(
                    kinds.PODS,
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    current,
                    subresource="status",
                )

    def _with_status(self, node_name: str, node: dict[str, Any]) -> dict[str, Any]:
        current = self.registry.get(kinds.NODES, "", node_name)
        current["status"] = node["status"]
        return current

    def taint_device(
        self,
        node_name: str,
        device: str,
        *,
        effect: str = "NoExecute",
        key: str = "gangq.dev/unhealthy",
    ) -> None:
        """Publish a device taint in the node's ResourceSlice, as a DRA driver would."""
        for resource_slice in list(self.registry.storage.items(kinds.RESOURCE_SLICES.key)):
            if (resource_slice.get("spec") or {}).get("nodeName") != node_name:
                continue
            current = self.registry.get(
                kinds.RESOURCE_SLICES, "", resource_slice["metadata"]["name"]
            )
            for entry in current["spec"].get("devices") or []:
                if entry.get("name") == device:
                    entry.setdefault("taints", []).append(
                        {
                            "key": key,
                            "value": "true",
                            "effect": effect,
                            "timeAdded": self.registry.now(),
                        }
                    )
            self.registry.update(kinds.RESOURCE_SLICES, "", current["metadata"]["name"], current)


def _downward_files(pod: dict[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    """The pod's downward-API files that show its annotations or labels, by (volume, path)."""
    metadata = pod["metadata"]
    files: dict[tuple[str, str], dict[str, str]] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        for item in (volume.get("downwardAPI") or {}).get("items") or []:
            field_path = (item.get("fieldRef") or {}).get("fieldPath")
            if field_path in ("metadata.annotations", "metadata.labels"):
                shown = metadata.get(field_path.removeprefix("metadata.")) or {}
                files[(str(volume.get("name")), str(item.get("path")))] = {
                    str(k): str(v) for k, v in shown.items()
                }
    return files


def _is_ready(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
