"""The Kubernetes resources gangq reads and writes, and the URL paths that reach them.

Owns group, version, plural and scope of each kind, so every request and watch builds its path
one way. It must not perform requests.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """One REST resource; `group` is empty for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "", *, subresource: str = "") -> str:
        """`/api/v1/namespaces/ns/pods/name/status`; no namespace lists across all."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{_segment(namespace)}")
        parts.append(self.plural)
        if name:
            parts.append(_segment(name))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


@functools.lru_cache(maxsize=8192)
def _segment(text: str) -> str:
    """One percent-encoded path segment: an object's name recurs in every write to it, and
    `quote` costs about a microsecond each time."""
    return quote(text, safe="")


PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
RESOURCE_SLICES = Resource(
    "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False
)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
TRAINING_JOBS = Resource("gangq.dev", "v1alpha1", "trainingjobs", "TrainingJob")
POD_GROUPS = Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup")
"""Served only where the GenericWorkload and GangScheduling feature gates are on (1.35+)."""
