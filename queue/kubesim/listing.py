"""LIST semantics: resourceVersion rules, selectors and `limit`/`continue` pages.

Owns the list options validation (422/410/504 Status bodies as the real server answers them),
the continue-token format (base64url JSON `{"v","rv","start"}`). Tables for `kubectl get` are
rendered by `tables.py`. Pages are cut from the current state, not from a snapshot at the token's
resourceVersion (see docs/emulator.md). It must not change any object.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gangq.queue.kubesim import kinds, selectors, status
from gangq.queue.kubesim.storage import Storage


@dataclass(frozen=True, slots=True)
class Filter:
    """Which objects a list or watch returns."""

    namespace: str | None
    labels: list[selectors.Requirement]
    fields: list[selectors.FieldRequirement]

    def matches(self, obj: dict[str, Any]) -> bool:
        if (
            self.namespace is not None
            and (obj.get("metadata") or {}).get("namespace") != self.namespace
        ):
            return False
        return selectors.labels_match(self.labels, obj) and selectors.fields_match(self.fields, obj)


def parse_filter(rt: kinds.ResourceType, namespace: str | None, query: Mapping[str, str]) -> Filter:
    labels = selectors.parse_labels(query.get("labelSelector", ""))
    described = f"{rt.api_version}, Kind={rt.kind}" if rt.group and not rt.is_custom else None
    fields = selectors.parse_fields(
        query.get("fieldSelector", ""), supports=rt.supports_field, resource=described
    )
    return Filter(namespace, labels, fields)


def _encode_token(resource_version: int, start: str) -> str:
    raw = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": resource_version, "start": start}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_token(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        return int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as error:
        raise status.bad_request(
            "invalid continue token: continue key is not valid: illegal base64 data at input byte "
            f"{_first_bad_byte(token)}"
        ) from error


def _first_bad_byte(token: str) -> int:
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    return next((i for i, char in enumerate(token) if char not in alphabet), len(token))


def check_resource_version(query: Mapping[str, str], storage: Storage, *, watch: bool) -> None:
    """ListOptions rules shared by list and watch (corpus 3-21, 3-29, 3-32)."""
    match = query.get("resourceVersionMatch", "")
    version = query.get("resourceVersion", "")
    if query.get("sendInitialEvents") == "true" and match != "NotOlderThan":
        raise status.list_options_invalid(
            status.forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )
        )
    if match and not version and not watch:
        raise status.list_options_invalid(
            status.forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )
        )
    if version and not version.isdigit():
        raise status.bad_request(f"invalid resource version: {version!r}")


def _token_key(obj: dict[str, Any], selection: Filter) -> str:
    """The object's storage key relative to the listed prefix, as continue tokens hold it."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    if namespace and selection.namespace is None:
        return f"{namespace}/{metadata.get('name')}"
    return f"/{metadata.get('name')}"


def _sort_key(key: str, selection: Filter) -> tuple[str, str]:
    if selection.namespace is not None or "/" not in key.lstrip("/"):
        return selection.namespace or "", key.lstrip("/")
    namespace, _, name = key.partition("/")
    return namespace, name


def _integer(query: Mapping[str, str], name: str) -> int:
    text = query.get(name) or "0"
    if not text.lstrip("-").isdigit():
        raise status.bad_request(f'invalid value for {name}: "{text}" is not an integer')
    return int(text)


def _check_list_version(storage: Storage, query: Mapping[str, str]) -> None:
    version = query.get("resourceVersion", "")
    current = storage.resource_version
    if version and version != "0" and int(version) > current:
        raise status.ApiError(
            504,
            "Timeout",
            f"Timeout: Too large resource version: {version}, current: {current}",
            details={
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                ],
                "retryAfterSeconds": 1,
            },
        )
    exact = query.get("resourceVersionMatch") == "Exact"
    if exact and version and int(version) < storage.compacted:
        raise status.expired("The resourceVersion for the provided list is too old.")


def _continue_from(storage: Storage, token: str) -> str:
    """The key a continue token resumes after; 410 with a fresh token once it is compacted."""
    token_rv, start = _decode_token(token)
    if token_rv < storage.compacted:
        raise status.expired(
            "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter, or use the continue "
            "token in this response to retrieve the remainder of the results. Continuing with "
            "the provided token results in an inconsistent list - objects that were created, "
            "modified, or deleted between the time the first chunk was returned and now may "
            "show up in the list.",
            metadata={"continue": _encode_token(-1, start)},
        )
    return start


def list_objects(
    rt: kinds.ResourceType,
    storage: Storage,
    query: Mapping[str, str],
    *,
    namespace: str | None,
    present: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    check_resource_version(query, storage, watch=False)
    selection = parse_filter(rt, namespace, query)
    _check_list_version(storage, query)
    token = query.get("continue", "")
    start = _continue_from(storage, token) if token else ""
    limit = _integer(query, "limit") if query.get("resourceVersion") != "0" else 0
    current = storage.resource_version
    matching = _matching(rt, storage, selection, start=start.rstrip("\x00"), has_start=bool(token))
    items: list[dict[str, Any]] = []
    metadata: dict[str, Any] = {"resourceVersion": str(current)}
    for obj in matching:
        if limit > 0 and len(items) == limit:
            metadata["continue"] = _encode_token(current, _token_key(items[-1], selection) + "\x00")
            if not selection.labels and not selection.fields:
                metadata["remainingItemCount"] = 1 + sum(1 for _ in matching)
            break
        items.append(_list_item(rt, present(obj)))
    if rt.is_custom:
        metadata.setdefault("continue", "")
    return {
        "kind": f"{rt.kind}List",
        "apiVersion": rt.api_version,
        "metadata": metadata,
        "items": items,
    }


def _matching(
    rt: kinds.ResourceType, storage: Storage, selection: Filter, *, start: str, has_start: bool
) -> Iterator[dict[str, Any]]:
    after = _sort_key(start, selection)
    for obj in storage.items(rt.store_key, selection.namespace):
        metadata = obj.get("metadata") or {}
        if has_start and (metadata.get("namespace") or "", metadata.get("name")) <= after:
            continue
        if selection.matches(obj):
            yield obj


def _list_item(rt: kinds.ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Built-in list items carry no kind/apiVersion; custom resources keep theirs."""
    if rt.is_custom:
        return obj
    return {key: value for key, value in obj.items() if key not in ("kind", "apiVersion")}
