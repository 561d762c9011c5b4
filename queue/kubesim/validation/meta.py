"""Name formats and `metadata` rules shared by every kind (names, ownerReferences, finalizers).

Owns the regular expressions and messages of Kubernetes' name validation. It must not know
any kind's spec.
"""

from __future__ import annotations

import re
from typing import Any

from gangq.queue.kubesim import status

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + ")*"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    f"for validation is '{_DNS1123_LABEL}')"
)
DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_DNS1123_SUBDOMAIN}')"
)
NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{_QUALIFIED_NAME}')"
)


def is_dns_label(value: str) -> bool:
    return len(value) <= 63 and re.fullmatch(_DNS1123_LABEL, value) is not None


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and re.fullmatch(_DNS1123_SUBDOMAIN, value) is not None


def qualified_name_causes(path: str, value: str) -> list[status.Cause]:
    """`prefix/name` as label keys, gates and finalizers use it."""
    prefix, _, name = value.rpartition("/")
    causes: list[status.Cause] = []
    if prefix and not is_dns_subdomain(prefix):
        causes.append(status.invalid_value(path, value, "prefix part " + DNS_SUBDOMAIN_MESSAGE))
    if not name:
        causes.append(status.invalid_value(path, value, "name part must be non-empty"))
    if not re.fullmatch(_QUALIFIED_NAME, name) or len(name) > 63:
        causes.append(status.invalid_value(path, value, NAME_PART_MESSAGE))
    return causes


def name_causes(obj: dict[str, Any], *, dns_label: bool) -> list[status.Cause]:
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") or ""
    if not name:
        return [status.required("metadata.name", "name or generateName is required")]
    valid = is_dns_label(name) if dns_label else is_dns_subdomain(name)
    if not valid:
        message = DNS_LABEL_MESSAGE if dns_label else DNS_SUBDOMAIN_MESSAGE
        return [status.invalid_value("metadata.name", name, message)]
    return []


def owner_reference_causes(obj: dict[str, Any]) -> list[status.Cause]:
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    causes: list[status.Cause] = []
    for reference in references:
        for key in ("apiVersion", "kind", "name", "uid"):
            if not reference.get(key):
                causes.append(
                    status.invalid_value(f"metadata.ownerReferences.{key}", "", "must not be empty")
                )
    controllers = [ref for ref in references if ref.get("controller")]
    if len(controllers) > 1:
        named = " and ".join(f"{ref.get('kind')}/{ref.get('name')}" for ref in controllers)
        causes.append(
            status.invalid_value(
                "metadata.ownerReferences",
                references,
                "Only one reference can have Controller set to true. "
                f'Found "true" in references for {named}',
            )
        )
    return causes


def finalizer_causes(obj: dict[str, Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    for index, finalizer in enumerate((obj.get("metadata") or {}).get("finalizers") or []):
        if "/" not in finalizer and finalizer not in ("orphan", "foregroundDeletion", "kubernetes"):
            continue
        causes.extend(qualified_name_causes(f"metadata.finalizers[{index}]", finalizer))
    return causes


def label_causes(obj: dict[str, Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    for key, value in ((obj.get("metadata") or {}).get("labels") or {}).items():
        causes.extend(qualified_name_causes("metadata.labels", key))
        if value and (len(value) > 63 or not re.fullmatch(_QUALIFIED_NAME, value)):
            causes.append(
                status.invalid_value(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character "
                    "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                )
            )
    return causes


def new_finalizers_while_terminating(
    new: dict[str, Any], old: dict[str, Any]
) -> list[status.Cause]:
    """The real server lists this cause twice (corpus 4-04); so do we."""
    if not (old.get("metadata") or {}).get("deletionTimestamp"):
        return []
    before = set((old.get("metadata") or {}).get("finalizers") or [])
    added = [f for f in (new.get("metadata") or {}).get("finalizers") or [] if f not in before]
    if not added:
        return []
    listed = ", ".join(f'"{finalizer}"' for finalizer in added)
    cause = status.forbidden(
        "metadata.finalizers",
        "no new finalizers can be added if the object is being deleted, "
        f"found new finalizers []string{{{listed}}}",
    )
    return [cause, cause]
