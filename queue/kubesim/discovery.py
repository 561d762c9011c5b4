"""Discovery documents: /version, /api, /api/v1, /apis, /apis/<group>[/<version>].

Owns the shape of APIVersions, APIGroupList, APIGroup and APIResourceList (including the
subresource entries and storageVersionHash) and the aggregated v2 APIGroupDiscoveryList, built
from the resource types currently installed. It must not serve objects.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

from gangq.queue.kubesim import kinds

VERSION = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.2",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.27.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}
AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_EXTRA_SUBRESOURCES: dict[str, tuple[tuple[str, str, str, tuple[str, ...]], ...]] = {
    "/pods": (
        ("binding", "", "Binding", ("create",)),
        ("eviction", "policy", "Eviction", ("create",)),
    ),
}


def _hash(rt: kinds.ResourceType) -> str:
    digest = hashlib.sha256(f"{rt.group}/{rt.version}/{rt.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _verbs(rt: kinds.ResourceType) -> list[str]:
    if rt.key == kinds.NAMESPACES.key:
        return [verb for verb in kinds.ALL_VERBS if verb != "deletecollection"]
    return list(kinds.ALL_VERBS)


def resource_list(group_version: str, types: Iterable[kinds.ResourceType]) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    if group_version == "v1":
        resources.append(
            {
                "name": "bindings",
                "singularName": "binding",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    for rt in sorted(types, key=lambda t: t.plural):
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": _verbs(rt),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        entry["storageVersionHash"] = _hash(rt)
        resources.append(entry)
        for name, group, kind, verbs in _EXTRA_SUBRESOURCES.get(rt.key, ()):
            sub: dict[str, Any] = {
                "name": f"{rt.plural}/{name}",
                "singularName": "",
                "namespaced": True,
            }
            if group:
                sub |= {"group": group, "version": "v1"}
            resources.append(sub | {"kind": kind, "verbs": list(verbs)})
        if rt.has_status:
            resources.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": list(kinds.STATUS_VERBS),
                }
            )
    resources.sort(key=lambda r: r["name"])
    body: dict[str, Any] = {"kind": "APIResourceList"}
    if group_version != "v1":
        body["apiVersion"] = "v1"
    return body | {"groupVersion": group_version, "resources": resources}


def groups(types: Iterable[kinds.ResourceType]) -> dict[str, list[str]]:
    """Group -> served versions, in first-seen order."""
    found: dict[str, list[str]] = {}
    for rt in types:
        if rt.group and rt.version not in found.setdefault(rt.group, []):
            found[rt.group].append(rt.version)
    return found


def api_group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{version}", "version": version} for version in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def group_list(types: Iterable[kinds.ResourceType]) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [api_group(name, versions) for name, versions in groups(types).items()],
    }


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _aggregated_resource(rt: kinds.ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": _verbs(rt),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    if rt.has_status:
        entry["subresources"] = [
            {
                "subresource": "status",
                "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
                "verbs": list(kinds.STATUS_VERBS),
            }
        ]
    return entry


def aggregated(types: Iterable[kinds.ResourceType], *, core: bool) -> dict[str, Any]:
    """APIGroupDiscoveryList (v2) for /api (core) or /apis (named groups)."""
    by_group: dict[str, dict[str, list[kinds.ResourceType]]] = {}
    for rt in types:
        if (rt.group == "") == core:
            by_group.setdefault(rt.group, {}).setdefault(rt.version, []).append(rt)
    items = []
    for name, versions in by_group.items():
        items.append(
            {
                "metadata": {"name": name, "creationTimestamp": None},
                "versions": [
                    {
                        "version": version,
                        "resources": [
                            _aggregated_resource(rt) for rt in sorted(rts, key=lambda t: t.plural)
                        ],
                        "freshness": "Current",
                    }
                    for version, rts in versions.items()
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
