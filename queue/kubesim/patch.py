"""The three patch formats: JSON merge patch, JSON patch and strategic merge patch.

Owns applying a patch document to a JSON object. Strategic merge knows the merge keys of the
list fields gangq and ordinary controllers patch (containers, schedulingGates, conditions,
tolerations are atomic, finalizers merge as a set); other lists are replaced. It must not
validate the result: the caller runs the kind's update validation on it.
"""

from __future__ import annotations

from typing import Any

from gangq.queue.kubesim import status
from gangq.queue.kubesim.clone import clone

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "conditions": "type",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "addresses": "type",
}
"""List fields merged element-wise by key, as the Kubernetes Go types declare them."""

SET_LISTS = frozenset({"finalizers"})
"""Lists of scalars merged as a union (`patchStrategy:"merge"` on a primitive list)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise status.invalid_request()
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str]) -> Any:
    current = document
    for part in parts[:-1]:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise status.invalid_request()
    return current


def _read(document: Any, parts: list[str]) -> Any:
    if not parts:
        return document
    parent = _parent(document, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise status.invalid_request()


def _add(document: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(document, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise status.invalid_request()
    else:
        raise status.invalid_request()
    return document


def _remove(document: Any, parts: list[str]) -> Any:
    if not parts:
        raise status.invalid_request()
    parent = _parent(document, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise status.invalid_request()
    return document


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; any failing operation (a `test` mismatch, a bad path) rejects the whole patch."""
    if not isinstance(operations, list):
        raise status.bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    document = clone(target)
    for operation in operations:
        if not isinstance(operation, dict):
            raise status.invalid_request()
        op = operation.get("op")
        parts = _pointer(str(operation.get("path", "")))
        if op == "add":
            document = _add(document, parts, clone(operation.get("value")))
        elif op == "remove":
            document = _remove(document, parts)
        elif op == "replace":
            _read(document, parts)
            document = _add(_remove(document, parts), parts, clone(operation.get("value")))
        elif op in ("move", "copy"):
            source = _pointer(str(operation.get("from", "")))
            value = clone(_read(document, source))
            if op == "move":
                document = _remove(document, source)
            document = _add(document, parts, value)
        elif op == "test":
            if _read(document, parts) != operation.get("value"):
                raise status.invalid_request()
        else:
            raise status.invalid_request()
    return document


def _merge_list(
    field: str, target: list[Any], patch: list[Any], *, new_first: bool
) -> list[Any] | None:
    """Strategic merge of one list; None means the field is to be removed."""
    key = MERGE_KEYS.get(field)
    if field in SET_LISTS:
        return target + [item for item in patch if item not in target]
    if key is None:
        return clone(patch)
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        kept = [item for item in patch if not (isinstance(item, dict) and "$patch" in item)]
        return kept or None
    result = clone(target)
    added: list[Any] = []
    for item in patch:
        if not isinstance(item, dict):
            continue
        index = next(
            (i for i, existing in enumerate(result) if existing.get(key) == item.get(key)), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            added.append(strategic_merge({}, item, new_first=new_first))
        else:
            result[index] = strategic_merge(result[index], item, new_first=new_first)
    # A strategic merge patch puts new elements first (corpus 2-35); apply appends (6-28).
    return (added + result if new_first else result + added) or None


def strategic_merge(
    target: dict[str, Any], patch: dict[str, Any], *, new_first: bool = True
) -> dict[str, Any]:
    """Strategic merge patch for the fields listed in MERGE_KEYS; directives it does not use
    for ordering (`$setElementOrder`, `$retainKeys`) are accepted and change nothing."""
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    result = clone(target)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [item for item in result.get(field) or [] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = strategic_merge(result[key], value, new_first=new_first)
        elif isinstance(value, dict):
            result[key] = strategic_merge({}, value, new_first=new_first)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            merged = _merge_list(key, result[key], value, new_first=new_first)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            merged = _merge_list(key, [], value, new_first=new_first)
            if merged is not None:
                result[key] = merged
        else:
            result[key] = clone(value)
    return result
