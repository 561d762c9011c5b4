"""OpenAPI documents for the served kinds: v3 (`/openapi/v3`, one document per group-version)
and v2 (`/openapi/v2`, JSON only).

Owns what kubectl reads before `apply`: the v3 index of group-versions, each with a path and
operation per verb carrying `x-kubernetes-group-version-kind` and the query parameters the
server honours (kubectl checks `fieldValidation` on PATCH to validate server-side), and the
schemas: a custom resource's from its CRD, the built-in kinds' as open objects (their fields
are validated by the strategies, not by a schema). PATCH bodies list no strategic-merge type,
so kubectl computes strategic merges of built-ins from its own compiled types rather than
from these open schemas. It must not validate anything itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from gangq.queue.kubesim import discovery, kinds

V3_PREFIX = "/openapi/v3/"
PROTOBUF_V2 = "application/com.github.proto-openapi.spec.v2"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_PACKAGES = {
    "": "io.k8s.api.core",
    "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
}
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
_APPLY = "application/apply-patch+yaml"


def group_version_path(rt: kinds.ResourceType) -> str:
    """The index key of a group-version: "api/v1" or "apis/<group>/<version>"."""
    return f"api/{rt.version}" if not rt.group else f"apis/{rt.group}/{rt.version}"


def schema_name(rt: kinds.ResourceType) -> str:
    """The component name the real server uses (reverse-domain group for custom resources)."""
    if rt.is_custom:
        return ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])
    package = _PACKAGES.get(rt.group, f"io.k8s.api.{rt.group.split('.')[0]}")
    return f"{package}.{rt.version}.{rt.kind}"


def _gvk(rt: kinds.ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _ref(name: str, prefix: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"{prefix}{name}"}]}


def _object_schema(rt: kinds.ResourceType, prefix: str) -> dict[str, Any]:
    base: dict[str, Any]
    if rt.schema is not None:
        base = json.loads(json.dumps(rt.schema))
    else:
        base = {
            "type": "object",
            "description": f"{rt.kind} as the emulator serves it.",
            "properties": {
                key: {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                for key in ("spec", "status")
            },
        }
    properties = base.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string", "description": "APIVersion of the object."}
    properties["kind"] = {"type": "string", "description": "Kind of the object."}
    properties["metadata"] = _ref(f"{META}.ObjectMeta", prefix) | {
        "default": {},
        "description": "Standard object's metadata.",
    }
    base["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return base


def _list_schema(rt: kinds.ResourceType, prefix: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": _ref(schema_name(rt), prefix)},
            "metadata": _ref(f"{META}.ListMeta", prefix) | {"default": {}},
        },
        "x-kubernetes-group-version-kind": [_gvk(rt) | {"kind": f"{rt.kind}List"}],
    }


def _meta_schemas() -> dict[str, Any]:
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    strings = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    return {
        f"{META}.ObjectMeta": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "generateName": {"type": "string"},
                "namespace": {"type": "string"},
                "uid": {"type": "string"},
                "resourceVersion": {"type": "string"},
                "generation": {"type": "integer", "format": "int64"},
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "deletionTimestamp": {"type": "string", "format": "date-time"},
                "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
                "labels": strings,
                "annotations": strings,
                "finalizers": {
                    "type": "array",
                    "items": {"type": "string", "default": ""},
                    "x-kubernetes-list-type": "set",
                },
                "ownerReferences": {
                    "type": "array",
                    "items": open_object,
                    "x-kubernetes-list-map-keys": ["uid"],
                    "x-kubernetes-list-type": "map",
                },
                "managedFields": {"type": "array", "items": open_object},
            },
        },
        f"{META}.ListMeta": {
            "type": "object",
            "properties": {
                "resourceVersion": {"type": "string"},
                "continue": {"type": "string"},
                "remainingItemCount": {"type": "integer", "format": "int64"},
            },
        },
        f"{META}.Status": open_object,
        f"{META}.Patch": {"type": "object"},
        f"{META}.DeleteOptions": open_object,
    }


def _parameter(name: str, description: str, *, kind: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": kind, "uniqueItems": True},
    }


_DRY_RUN = _parameter("dryRun", "When present, modifications are not persisted.")
_FIELD_MANAGER = _parameter("fieldManager", "The name of the actor making these changes.")
_FIELD_VALIDATION = _parameter(
    "fieldValidation",
    "Ignore, Warn (the default) or Strict: what to do with unknown or duplicate fields.",
)
_WRITE = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
_READ = [
    _parameter("labelSelector", "A selector on labels."),
    _parameter("fieldSelector", "A selector on fields."),
    _parameter("resourceVersion", "The resourceVersion to read at."),
    _parameter("limit", "The page size.", kind="integer"),
    _parameter("continue", "The token of the next page."),
    _parameter("watch", "Stream changes instead of listing.", kind="boolean"),
    _parameter("allowWatchBookmarks", "Send BOOKMARK events.", kind="boolean"),
    _parameter("timeoutSeconds", "How long a list or watch may take.", kind="integer"),
]


def _operation(
    rt: kinds.ResourceType,
    action: str,
    prefix: str,
    *,
    parameters: list[dict[str, Any]],
    response: str | None = None,
    body: tuple[str, ...] = (),
) -> dict[str, Any]:
    schema = {"$ref": f"{prefix}{response or schema_name(rt)}"}
    operation: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}",
        "parameters": parameters,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": schema}}}
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }
    if body:
        body_schema = (
            {"$ref": f"{prefix}{META}.Patch"}
            if action == "patch"
            else {"$ref": f"{prefix}{schema_name(rt)}"}
        )
        operation["requestBody"] = {
            "required": True,
            "content": {content: {"schema": body_schema} for content in body},
        }
    return operation


def _paths(rt: kinds.ResourceType, prefix: str) -> dict[str, dict[str, Any]]:
    root = f"/{group_version_path(rt)}"
    collection = (
        f"{root}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{root}/{rt.plural}"
    )
    scope: list[dict[str, Any]] = (
        [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}]
        if rt.namespaced
        else []
    )
    named = [*scope, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
    listed = f"{schema_name(rt)}List"
    patch_types = (*_PATCH_TYPES, _APPLY)
    item = {
        "get": _operation(rt, "get", prefix, parameters=named),
        "put": _operation(
            rt, "put", prefix, parameters=[*named, *_WRITE], body=("application/json",)
        ),
        "patch": _operation(
            rt,
            "patch",
            prefix,
            parameters=[*named, *_WRITE, _parameter("force", "")],
            body=patch_types,
        ),
        "delete": _operation(
            rt, "delete", prefix, parameters=[*named, _DRY_RUN], response=f"{META}.Status"
        ),
    }
    paths = {
        collection: {
            "get": _operation(rt, "list", prefix, parameters=[*scope, *_READ], response=listed),
            "post": _operation(
                rt, "post", prefix, parameters=[*scope, *_WRITE], body=("application/json",)
            ),
            "delete": _operation(
                rt,
                "deletecollection",
                prefix,
                parameters=[*scope, *_READ, _DRY_RUN],
                response=f"{META}.Status",
            ),
        },
        f"{collection}/{{name}}": item,
    }
    if rt.has_status:
        paths[f"{collection}/{{name}}/status"] = {
            verb: item[verb] | {"operationId": f"{verb}{rt.kind}Status"}
            for verb in ("get", "put", "patch")
        }
    return paths


def _served(types: Iterable[kinds.ResourceType]) -> dict[str, list[kinds.ResourceType]]:
    by_group_version: dict[str, list[kinds.ResourceType]] = {}
    for rt in types:
        by_group_version.setdefault(group_version_path(rt), []).append(rt)
    return by_group_version


def _document_hash(document: dict[str, Any]) -> str:
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha512(encoded).hexdigest().upper()[:128]


def v3_document(types: Iterable[kinds.ResourceType], path: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group-version ("api/v1", "apis/g/v"), None if unknown."""
    served = _served(types).get(path)
    if served is None:
        return None
    prefix = "#/components/schemas/"
    schemas = _meta_schemas()
    paths: dict[str, Any] = {}
    for rt in served:
        schemas[schema_name(rt)] = _object_schema(rt, prefix)
        schemas[f"{schema_name(rt)}List"] = _list_schema(rt, prefix)
        paths |= _paths(rt, prefix)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discovery.VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def v3_index(types: Iterable[kinds.ResourceType]) -> dict[str, Any]:
    """`/openapi/v3`: each group-version's document URL, with a hash clients cache by."""
    types = list(types)
    paths = {}
    for path in sorted(_served(types)):
        document = v3_document(types, path)
        paths[path] = {
            "serverRelativeURL": f"{V3_PREFIX}{path}?hash={_document_hash(document or {})}"
        }
    return {"paths": paths}


def v2_document(types: Iterable[kinds.ResourceType]) -> dict[str, Any]:
    """`/openapi/v2` as JSON: the same schemas under `definitions` and the same paths."""
    prefix = "#/definitions/"
    definitions = _meta_schemas()
    paths: dict[str, Any] = {}
    for served in _served(types).values():
        for rt in served:
            definitions[schema_name(rt)] = _object_schema(rt, prefix)
            definitions[f"{schema_name(rt)}List"] = _list_schema(rt, prefix)
            for route, operations in _paths(rt, prefix).items():
                paths[route] = {verb: _v2_operation(op) for verb, op in operations.items()}
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": discovery.VERSION["gitVersion"]},
        "paths": paths,
        "definitions": definitions,
    }


def _v2_operation(operation: dict[str, Any]) -> dict[str, Any]:
    converted = {key: value for key, value in operation.items() if key != "requestBody"}
    converted["parameters"] = [
        {key: value for key, value in parameter.items() if key != "schema"}
        | {"type": parameter["schema"]["type"]}
        for parameter in operation["parameters"]
    ]
    body = operation.get("requestBody")
    if body is not None:
        content = body["content"]
        converted["consumes"] = sorted(content)
        schema = next(iter(content.values()))["schema"]
        converted["parameters"].append(
            {"name": "body", "in": "body", "required": True, "schema": schema}
        )
    response = operation["responses"]["200"]
    converted["produces"] = ["application/json"]
    converted["responses"] = {
        "200": {
            "description": "OK",
            "schema": response["content"]["application/json"]["schema"],
        }
    }
    return converted
