"""What a request asks for, in the terms authorization decides on (verb, group, resource,
subresource, namespace, name, or a non-resource path).

Owns the parsing kube-apiserver's RequestInfoFactory does before any handler runs: it reads the
URL alone, so a request for an unknown group or resource is authorized (and may be refused)
before anything could answer 404. It must not look types up or decide access.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
"""What Go's strconv.ParseBool reads as true (the `watch` parameter)."""


@dataclass(frozen=True, slots=True)
class Attributes:
    verb: str
    path: str
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        """`resource/subresource`, as RBAC rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def parse(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    parts = [part for part in path.split("/") if part]
    plain = Attributes(verb=method.lower(), path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return plain
    group = ""
    rest = parts[1:]
    if parts[0] == "apis":
        if len(rest) < 3:
            return plain
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] == "watch":
        if len(rest) < 2:
            return plain
        verb, rest = "watch", rest[1:]
    else:
        verb = _METHOD_VERBS.get(method, "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch", "") in _TRUE else "list"
        name = _exact_name(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        verb=verb,
        path=path,
        resource_request=True,
        api_group=group,
        api_version=version,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


def _exact_name(selector: str) -> str:
    """A list or watch of `metadata.name=X` is authorized as a request for X."""
    for requirement in selector.split(","):
        key, sep, value = requirement.partition("==")
        if not sep:
            key, sep, value = requirement.partition("=")
        if sep and key.strip() == "metadata.name" and not key.endswith("!"):
            return value.strip()
    return ""
