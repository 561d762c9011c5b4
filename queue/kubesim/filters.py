"""Node filters of the simulated kube-scheduler: readiness, taints, selectors, affinity, host
ports, fit.

Owns the answer to "may this pod run on this node, ignoring devices?" and the reason when not,
in kube-scheduler's words. Pure: reads plain objects, returns a reason string or None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gangq.queue.core import quantity
from gangq.queue.core.errors import InvalidInputError


def _milli(value: Any) -> int:
    try:
        return quantity.parse_milli(str(value))
    except InvalidInputError:
        return 0


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """cpu/memory requests in thousandths (sum over containers, max with init containers)."""
    spec = pod.get("spec") or {}
    totals = {"cpu": 0, "memory": 0}
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        for name in totals:
            totals[name] += _milli(requests.get(name, 0))
    for container in spec.get("initContainers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        for name, total in list(totals.items()):
            totals[name] = max(total, _milli(requests.get(name, 0)))
    return totals


HostPort = tuple[str, str, int]
"""(protocol, hostIP, hostPort) a container asks of its node."""
PORTS_TAKEN = "node(s) didn't have free ports for the requested pod ports"
_ANY_IP = ("", "0.0.0.0")


def host_ports(pod: Mapping[str, Any]) -> frozenset[HostPort]:
    spec = pod.get("spec") or {}
    return frozenset(
        (str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ""), int(port["hostPort"]))
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for port in container.get("ports") or []
        if isinstance(port, Mapping) and isinstance(port.get("hostPort"), int) and port["hostPort"]
    )


def _ports_conflict(wanted: Iterable[HostPort], used: Iterable[HostPort]) -> bool:
    """NodePorts: the same protocol and port on the same or a wildcard address."""
    return any(
        protocol == other_protocol
        and port == other_port
        and (ip == other_ip or ip in _ANY_IP or other_ip in _ANY_IP)
        for protocol, ip, port in wanted
        for other_protocol, other_ip, other_port in used
    )


def is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Node and device tolerations match taints the same way (operator Equal by default)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _expression_matches(expression: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, operator = str(expression.get("key")), expression.get("operator")
    wanted = [str(v) for v in expression.get("values") or []]
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and wanted:
        try:
            left, right = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def matches_node_selector(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A NodeSelector (terms ORed, expressions ANDed), as affinity and DRA allocations use it."""
    if not selector:
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": str((node.get("metadata") or {}).get("name"))}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue
        if all(_expression_matches(e, labels) for e in expressions) and all(
            _expression_matches(e, fields) for e in field_expressions
        ):
            return True
    return False


def reject_reason(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    *,
    used: Mapping[str, int],
    pod_count: int,
    ports: Iterable[HostPort] = (),
) -> str | None:
    """Why the node cannot take the pod (devices aside), or None when it can, checked in the
    order of kube-scheduler's filters; `ports` are the host ports the node's pods hold."""
    spec = pod.get("spec") or {}
    if not is_ready(node) or (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable or not ready"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
            spec.get("tolerations") or [], taint
        ):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return "node(s) didn't match Pod's node affinity/selector"
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if affinity and not matches_node_selector(affinity, node):
        return "node(s) didn't match Pod's node affinity/selector"
    wanted = host_ports(pod)
    if wanted and _ports_conflict(wanted, ports):
        return PORTS_TAKEN
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if pod_count + 1 > _milli(allocatable.get("pods", 110)) // 1000:
        return "Too many pods"
    requests = pod_requests(pod)
    for name, label in (("cpu", "Insufficient cpu"), ("memory", "Insufficient memory")):
        if requests[name] and used.get(name, 0) + requests[name] > _milli(allocatable.get(name, 0)):
            return label
    return None
