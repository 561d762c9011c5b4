"""`kubectl get` Tables: the columns and cells the real server prints for each kind.

Owns the meta.k8s.io/v1 Table rendering: the built-in printers gangq users look at (pods,
nodes, namespaces, resourceclaims, podgroups, workloads, as kube-apiserver's printers define
them), a custom resource's `additionalPrinterColumns`, and the Name/Created At default of
every other kind. It must not filter or page: it renders the list `listing.py` produced.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gangq.queue.kubesim import kinds

ACCEPT = "as=Table"
NONE = "<none>"
UNKNOWN = "<unknown>"
NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
CREATED_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_ADDRESSES = (
    "List of addresses reachable to the node. Queried from cloud provider, if available. More "
    "info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is "
    "declared as mergeable, but the merge key is not sufficiently unique, which can cause data "
    "corruption when it is merged. Callers should instead use a full-replacement patch. See "
    "https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change "
    "during the lifetime of a Node. However, there are some exceptions where this may not be "
    "possible, such as Pods that inherit a Node's address in its own status or consumers of the "
    "downward API (status.hostIP)."
)

Cells = Callable[[dict[str, Any], datetime], list[Any]]


def _column(
    name: str, description: str, *, kind: str = "string", priority: int = 0, fmt: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


NAME = _column("Name", NAME_DESCRIPTION, fmt="name")
AGE = _column("Age", CREATED_DESCRIPTION)


def human_duration(seconds: int) -> str:
    """apimachinery's duration.HumanDuration, which kubectl's Age column shows."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    minutes, hours = seconds // 60, seconds // 3600
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if days < 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def age(value: Any, now: datetime) -> Any:
    """The time since a timestamp, as kubectl shows it ("5s", "3m20s", "2h", "4d")."""
    if not isinstance(value, str):
        return value
    try:
        then = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return value
    return human_duration(int((now - then).total_seconds()))


def _created(obj: dict[str, Any], now: datetime) -> Any:
    return age(obj["metadata"].get("creationTimestamp"), now)


def _pod_status(pod: dict[str, Any], spec: dict[str, Any], pod_status: dict[str, Any]) -> str:
    """printPod's STATUS: phase, then status.reason, a gate, a container's waiting or
    terminated reason, and Terminating while a deletion is pending."""
    reason = str(pod_status.get("reason") or pod_status.get("phase") or "")
    for condition in pod_status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    running = False
    for container in reversed(pod_status.get("containerStatuses") or []):
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated")
        if waiting.get("reason"):
            reason = str(waiting["reason"])
        elif terminated is not None and terminated.get("reason"):
            reason = str(terminated["reason"])
        elif terminated is not None:
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif container.get("ready") and "running" in state:
            running = True
    if reason == "Completed" and running:
        ready = any(c.get("type") == "Ready" for c in pod_status.get("conditions") or [])
        reason = "Running" if ready else "NotReady"
    phase = pod_status.get("phase")
    if pod["metadata"].get("deletionTimestamp"):
        if pod_status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    return reason


def _pod_cells(pod: dict[str, Any], now: datetime) -> list[Any]:
    spec, pod_status = pod.get("spec") or {}, pod.get("status") or {}
    containers = pod_status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready") and "running" in (c.get("state") or {}))
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    finished = [
        str(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt") or "")
        for c in containers
    ]
    last = max(finished, default="")
    restarted = f"{restarts} ({age(last, now)} ago)" if restarts and last else str(restarts)
    gates = spec.get("readinessGates") or []
    true = {c.get("type") for c in pod_status.get("conditions") or [] if c.get("status") == "True"}
    gated = f"{sum(1 for g in gates if g.get('conditionType') in true)}/{len(gates)}"
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status(pod, spec, pod_status),
        restarted,
        _created(pod, now),
        pod_status.get("podIP") or NONE,
        spec.get("nodeName") or NONE,
        pod_status.get("nominatedNodeName") or NONE,
        gated if gates else NONE,
    ]


POD_COLUMNS = (
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last "
        "container in this pod has restarted.",
    ),
    AGE,
    _column(
        "IP",
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not "
        "yet allocated.",
        priority=1,
    ),
    _column(
        "Node",
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a "
        "candidate for scheduling by the scheduler defined in schedulerName. Once this field is "
        "set, the kubelet for this node becomes responsible for the lifecycle of this pod. This "
        "field should not be used to express a desire for the pod to be scheduled on a specific "
        "node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
        priority=1,
    ),
    _column(
        "Nominated Node",
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it "
        "cannot be scheduled right away as preemption victims receive their graceful "
        "termination periods. This field does not guarantee that the pod will be scheduled on "
        "this node. Scheduler may decide to place the pod elsewhere if other nodes become "
        "available sooner. Scheduler may also decide to give the resources on this node to a "
        "higher priority pod that is created after preemption. As a result, this field may be "
        "different than PodSpec.nodeName when the pod is scheduled.",
        priority=1,
    ),
    _column(
        "Readiness Gates",
        "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready "
        "when all its containers are ready AND all conditions specified in the readiness gates "
        'have status equal to "True" More info: '
        "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
        priority=1,
    ),
)


def _node_cells(node: dict[str, Any], now: datetime) -> list[Any]:
    spec, node_status = node.get("spec") or {}, node.get("status") or {}
    states = [
        "Ready" if c.get("status") == "True" else "NotReady"
        for c in node_status.get("conditions") or []
        if c.get("type") == "Ready"
    ] or ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = node["metadata"].get("labels") or {}
    roles = sorted(
        {key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/")}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()) - {""}
    )
    info = node_status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        found = [a for a in node_status.get("addresses") or [] if a.get("type") == kind]
        return str(found[0].get("address")) if found else NONE

    return [
        ",".join(states),
        ",".join(roles) or NONE,
        _created(node, now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or UNKNOWN,
        info.get("kernelVersion") or UNKNOWN,
        info.get("containerRuntimeVersion") or UNKNOWN,
    ]


NODE_COLUMNS = (
    _column("Status", "The status of the node"),
    _column("Roles", "The roles of the node"),
    AGE,
    _column("Version", "Kubelet Version reported by the node."),
    _column("Internal-IP", _ADDRESSES, priority=1),
    _column("External-IP", _ADDRESSES, priority=1),
    _column(
        "OS-Image",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
        priority=1,
    ),
    _column(
        "Kernel-Version",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
        priority=1,
    ),
    _column(
        "Container-Runtime",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. "
        "containerd://1.4.2).",
        priority=1,
    ),
)


def _namespace_cells(namespace: dict[str, Any], now: datetime) -> list[Any]:
    return [(namespace.get("status") or {}).get("phase", ""), _created(namespace, now)]


NAMESPACE_COLUMNS = (_column("Status", "The status of the namespace"), AGE)


def _claim_cells(claim: dict[str, Any], now: datetime) -> list[Any]:
    """resourceClaimState: deleted, then pending or allocated(,reserved)."""
    claim_status = claim.get("status") or {}
    deleted = bool(claim["metadata"].get("deletionTimestamp"))
    states = ["deleted"] if deleted else []
    if not claim_status.get("allocation"):
        states += [] if deleted else ["pending"]
    else:
        states.append("allocated")
        if claim_status.get("reservedFor"):
            states.append("reserved")
    return [",".join(states), _created(claim, now)]


CLAIM_COLUMNS = (
    _column("State", "A summary of the current state (allocated, pending, reserved, etc.)."),
    AGE,
)


def _podgroup_cells(group: dict[str, Any], now: datetime) -> list[Any]:
    """Policy, the referenced Workload, and the PodGroupScheduled condition as a word (12-96)."""
    spec = group.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    kind = "Gang" if policy.get("gang") is not None else "Basic" if "basic" in policy else ""
    workload = ((spec.get("podGroupTemplateRef") or {}).get("workload") or {}).get("workloadName")
    state = "Pending"
    for condition in (group.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodGroupScheduled":
            state = "Scheduled" if condition.get("status") == "True" else "Unschedulable"
    return [kind, workload or NONE, state, _created(group, now)]


PODGROUP_COLUMNS = (
    _column(
        "Policy",
        "SchedulingPolicy defines the scheduling policy for this instance of the PodGroup. "
        "Controllers are expected to fill this field by copying it from a PodGroupTemplate. "
        "This field is immutable.",
    ),
    _column("Workload", "Name of the referenced Workload object"),
    _column("Status", "Status of the PodGroup"),
    AGE,
)

PRINTERS: dict[str, tuple[tuple[dict[str, Any], ...], Cells]] = {
    kinds.PODS.key: (POD_COLUMNS, _pod_cells),
    kinds.NODES.key: (NODE_COLUMNS, _node_cells),
    kinds.NAMESPACES.key: (NAMESPACE_COLUMNS, _namespace_cells),
    kinds.RESOURCE_CLAIMS.key: (CLAIM_COLUMNS, _claim_cells),
    kinds.PODGROUPS.key: (PODGROUP_COLUMNS, _podgroup_cells),
    kinds.WORKLOADS.key: ((AGE,), lambda workload, now: [_created(workload, now)]),
}
"""Built-in kinds with a printer; the others get the default Name/Created At table."""


def _json_path(obj: Any, path: str) -> Any:
    current = obj
    for part in path.strip(".").split("."):
        if not isinstance(current, dict):
            return None
        current = current.get(part)
    return current


def _custom_printer(rt: kinds.ResourceType) -> tuple[tuple[dict[str, Any], ...], Cells]:
    """A CRD's additionalPrinterColumns; a column without description gets the server's."""
    columns = tuple(
        _column(
            str(column.get("name", "")),
            str(
                column.get("description")
                or "Custom resource definition column (in JSONPath format): "
                + str(column.get("jsonPath", ""))
            ),
            kind=str(column.get("type", "string")),
            priority=int(column.get("priority", 0)),
            fmt=str(column.get("format", "")),
        )
        for column in rt.printer_columns
    )

    def cells(obj: dict[str, Any], now: datetime) -> list[Any]:
        values = [_json_path(obj, str(c.get("jsonPath", ""))) for c in rt.printer_columns]
        return [
            age(value, now) if column["type"] == "date" else value
            for column, value in zip(columns, values, strict=True)
        ]

    return columns, cells


def _default_printer() -> tuple[tuple[dict[str, Any], ...], Cells]:
    created = _column("Created At", CREATED_DESCRIPTION, kind="date")
    return (created,), lambda obj, now: [obj["metadata"].get("creationTimestamp")]


def printer(rt: kinds.ResourceType) -> tuple[tuple[dict[str, Any], ...], Cells]:
    if rt.printer_columns:
        return _custom_printer(rt)
    return PRINTERS.get(rt.key) or _default_printer()


def as_table(
    rt: kinds.ResourceType, listing: dict[str, Any], *, include_object: str, now: datetime
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table from a list (or a one-item list for GET of one object)."""
    columns, cells = printer(rt)
    rows = []
    for item in listing["items"]:
        row: dict[str, Any] = {"cells": [item["metadata"].get("name"), *cells(item, now)]}
        if include_object == "None":
            row["object"] = None
        elif include_object == "Object":
            row["object"] = item
        else:
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": listing["metadata"]["resourceVersion"]},
        "columnDefinitions": [NAME, *columns],
        "rows": rows,
    }
