"""Whether a replica's pod may run on a node, devices aside: readiness, cordon, taints against
tolerations, nodeSelector and required node affinity (the checks kube-scheduler would make).

Only the static part lives here; CPU, memory and pod-count room change during a cycle and are
tracked by `pool`. Pure functions, no state.
"""

from __future__ import annotations

from gangq.queue.core.model import (
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequirements,
    Taint,
    Toleration,
)

_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def untolerated(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]
) -> tuple[Taint, ...]:
    """The NoSchedule/NoExecute taints no toleration matches; PreferNoSchedule is a hint."""
    return tuple(
        taint
        for taint in taints
        if taint.effect in _BLOCKING_EFFECTS
        and not any(_tolerates(toleration, taint) for toleration in tolerations)
    )


def is_tolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> bool:
    """Every NoSchedule/NoExecute taint needs a matching toleration."""
    return not untolerated(taints, tolerations)


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _requirement_holds(requirement: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    value = labels.get(requirement.key)
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(requirement.values) == 1:
        left, right = _as_int(value), _as_int(requirement.values[0])
        if left is None or right is None:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _term_holds(term: NodeSelectorTerm, labels: dict[str, str]) -> bool:
    """An empty term matches nothing, as in Kubernetes."""
    return bool(term.match_expressions) and all(
        _requirement_holds(requirement, labels) for requirement in term.match_expressions
    )


NODE_CONDITION_TAINT_PREFIX = "node.kubernetes.io/"
"""Taints the node lifecycle controller sets and lifts by itself (not-ready, unreachable,
unschedulable, pressure): a passing state, not the node's configuration."""


def is_ever_accepted(node: Node, pod: PodRequirements) -> bool:
    """True when the node's configuration (labels, taints an administrator set) admits the
    pod, whatever its passing state (ready, cordoned, condition taints)."""
    taints = tuple(t for t in node.taints if not t.key.startswith(NODE_CONDITION_TAINT_PREFIX))
    return _is_configured_for(node, pod, taints=taints)


def is_accepted(node: Node, pod: PodRequirements) -> bool:
    """True when the pod may be bound to the node as far as labels, taints and state go."""
    if not node.is_schedulable:
        return False
    return _is_configured_for(node, pod, taints=node.taints)


def _is_configured_for(node: Node, pod: PodRequirements, *, taints: tuple[Taint, ...]) -> bool:
    labels = dict(node.labels)
    if any(labels.get(key) != value for key, value in pod.node_selector):
        return False
    if pod.required_node_affinity and not any(
        _term_holds(term, labels) for term in pod.required_node_affinity
    ):
        return False
    return is_tolerated(taints, pod.tolerations)
