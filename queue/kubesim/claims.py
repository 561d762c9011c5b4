"""The resourceclaim controller of kube-controller-manager, as far as pods need it.

Owns creating a pod's claim from a ResourceClaimTemplate and, once a pod is gone or done (a
terminal phase), removing it from its claims' `reservedFor`; a claim carrying the
delete-protection finalizer is then deallocated and the finalizer dropped (corpus
5-42..5-46), others keep their allocation.
It must not allocate: that is the scheduler's job.
"""

from __future__ import annotations

from typing import Any

from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.registry import Registry

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def claim_from_template(
    registry: Registry, pod: dict[str, Any], entry: dict[str, Any]
) -> str | None:
    """What the resourceclaim controller does for a pod naming a ResourceClaimTemplate."""
    namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    template_type = registry.types["resource.k8s.io/resourceclaimtemplates"]
    template = registry.find(template_type, namespace, str(entry["resourceClaimTemplateName"]))
    if template is None:
        return None
    name = f"{pod_name}-{entry.get('name')}"
    if registry.find(kinds.RESOURCE_CLAIMS, namespace, name) is None:
        owner = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "uid": pod["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        body = {
            "metadata": {
                "name": name,
                "ownerReferences": [owner],
                "annotations": {"resource.kubernetes.io/pod-claim-name": str(entry.get("name"))},
            },
            "spec": (template.get("spec") or {}).get("spec") or {},
        }
        registry.create(kinds.RESOURCE_CLAIMS, namespace, body)
    current = registry.get(kinds.PODS, namespace, pod_name)
    statuses = current.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
    if not any(s.get("name") == entry.get("name") for s in statuses):
        statuses.append({"name": entry.get("name"), "resourceClaimName": name})
        registry.update(kinds.PODS, namespace, pod_name, current, subresource="status")
    return name


def release(registry: Registry, pod: dict[str, Any]) -> None:
    """The resourceclaim controller: drop a gone or done pod from reservedFor; deallocate claims
    that carry the delete-protection finalizer once nobody holds them (corpus 5-42..5-46)."""
    namespace, uid = pod["metadata"].get("namespace") or "", pod["metadata"].get("uid")
    for claim in list(registry.storage.items(kinds.RESOURCE_CLAIMS.key, namespace)):
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if not any(r.get("uid") == uid for r in reserved):
            continue
        current = registry.get(kinds.RESOURCE_CLAIMS, namespace, claim["metadata"]["name"])
        remaining = [r for r in reserved if r.get("uid") != uid]
        protected = DELETE_PROTECTION in (current["metadata"].get("finalizers") or [])
        current["status"]["reservedFor"] = remaining
        if not remaining:
            current["status"].pop("reservedFor")
            if protected:
                current["status"].pop("allocation", None)
        written = registry.update(
            kinds.RESOURCE_CLAIMS,
            namespace,
            current["metadata"]["name"],
            current,
            subresource="status",
        ).object
        if (
            protected
            and not remaining
            and registry.find(kinds.RESOURCE_CLAIMS, namespace, current["metadata"]["name"])
        ):
            written["metadata"]["finalizers"] = [
                f for f in written["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION
            ]
            registry.update(kinds.RESOURCE_CLAIMS, namespace, current["metadata"]["name"], written)
