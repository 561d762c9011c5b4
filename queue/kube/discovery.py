"""What the API server serves that gangq can use or do without, read once at start.

Owns the choice of the `pod_groups` setting: `auto` follows discovery, `on` without the API
is a start-up error. Kubernetes 1.35+ serves `scheduling.k8s.io/v1alpha2` PodGroups only with
the GenericWorkload and GangScheduling feature gates on; there kube-scheduler binds a group's
pods in one pod-group cycle, or none of them.
"""

from __future__ import annotations

import logging

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import resources, retry
from gangq.queue.kube.client import Kube, KubeError

logger = logging.getLogger(__name__)


async def serves_pod_groups(kube: Kube) -> bool:
    """True when the API server serves `podgroups` in `scheduling.k8s.io/v1alpha2`."""
    group = resources.POD_GROUPS
    path = f"/apis/{group.group}/{group.version}"
    try:
        found = await retry.retrying(
            lambda: kube.request("GET", path), what=f"discovery of {group.api_version}"
        )
    except KubeError as error:
        if error.status == 404:
            return False
        raise
    return any(r.get("name") == group.plural for r in found.get("resources") or [])


async def use_pod_groups(kube: Kube, mode: str) -> bool:
    """Whether this controller uses PodGroups, from the setting and the API server."""
    if mode == "off":
        return False
    available = await serves_pod_groups(kube)
    if mode == "on" and not available:
        raise InvalidInputError(
            "pod_groups is on, but the API server does not serve "
            f"{resources.POD_GROUPS.plural}.{resources.POD_GROUPS.api_version} (Kubernetes 1.35+ "
            "with the feature gates GenericWorkload and GangScheduling on kube-apiserver and "
            "kube-scheduler, and --runtime-config=scheduling.k8s.io/v1alpha2=true); "
            "set pod_groups to auto or off"
        )
    logger.info("PodGroups %s", "in use" if available else "not served: gangs go without them")
    return available
