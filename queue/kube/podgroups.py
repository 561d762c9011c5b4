"""What kube-scheduler says of a PodGroup: its `PodGroupScheduled` condition.

kube-scheduler writes the condition after each pod-group cycle: True once it bound the group's
pods together, False (Unschedulable) while it cannot, and it retries such a group with no
backoff. Pure: reads objects, sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangq.queue.kube import objects

SCHEDULED = "PodGroupScheduled"
"""The condition kube-scheduler writes on a group after each pod-group cycle."""


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A PodGroup as the REST API and the UI show it."""

    name: str
    min_count: int
    status: str
    """`True`, `False`, or `Pending` before kube-scheduler wrote the condition."""
    reason: str
    message: str
    since: str
    """The condition's lastTransitionTime ("" while Pending)."""
    created: str


def shown(group: Mapping[str, Any]) -> Scheduled:
    found = objects.condition(group, SCHEDULED) or {}
    meta = group.get("metadata") or {}
    policy = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    return Scheduled(
        name=str(meta.get("name") or ""),
        min_count=int(policy.get("minCount") or 1),
        status=str(found.get("status") or "Pending"),
        reason=str(found.get("reason") or ""),
        message=str(found.get("message") or ""),
        since=str(found.get("lastTransitionTime") or ""),
        created=str(meta.get("creationTimestamp") or ""),
    )


def unschedulable_since(group: Mapping[str, Any]) -> float | None:
    """When kube-scheduler last called the group unschedulable, if it still does."""
    found = objects.condition(group, SCHEDULED)
    if found is None or found.get("status") != "False":
        return None
    return objects.parse_rfc3339(found.get("lastTransitionTime"))
