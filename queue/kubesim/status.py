"""Kubernetes `Status` bodies and the field-error causes of 422 responses.

Owns the exact wording and shape of API errors as a real kube-apiserver writes them (see the
reference corpus): 404/409 name the resource plural, 422 names the Kind. It must not decide
when an error happens; callers raise `ApiError` with one of the builders below.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

INVALID_REQUEST = "the server rejected our request due to an error in our request"
NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)


@dataclass(frozen=True, slots=True)
class Cause:
    """One field error of a 422 response."""

    field: str
    reason: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


class ApiError(Exception):
    """An error the server answers with a Status body (or plain text when `text` is set)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        text: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.metadata = metadata or {}
        self.text = text
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status


def go_value(value: Any) -> str:
    """Render a value the way field errors quote it (strings quoted, objects as JSON)."""
    return json.dumps(value, separators=(",", ":"))


def invalid_value(path: str, value: Any, detail: str) -> Cause:
    return Cause(path, "FieldValueInvalid", f"Invalid value: {go_value(value)}: {detail}")


def required(path: str, detail: str = "") -> Cause:
    return Cause(path, "FieldValueRequired", "Required value" + (f": {detail}" if detail else ""))


def forbidden(path: str, detail: str = "") -> Cause:
    """A refused field; some rules give no detail at all (a PodGroup's disruptionMode, 12-86)."""
    return Cause(path, "FieldValueForbidden", "Forbidden" + (f": {detail}" if detail else ""))


def not_supported(path: str, value: Any, supported: list[Any]) -> Cause:
    choices = ", ".join(go_value(choice) for choice in supported)
    return Cause(
        path,
        "FieldValueNotSupported",
        f"Unsupported value: {go_value(value)}: supported values: {choices}",
    )


def duplicate(path: str, value: Any) -> Cause:
    return Cause(path, "FieldValueDuplicate", f"Duplicate value: {go_value(value)}")


def too_many(path: str, actual: int, limit: int) -> Cause:
    return Cause(path, "FieldValueTooMany", f"Too many: {actual}: must have at most {limit} items")


def too_long(path: str, limit: int) -> Cause:
    return Cause(path, "FieldValueTooLong", f"Too long: may not be more than {limit} bytes")


def type_invalid(path: str, actual: str, expected: str) -> Cause:
    return Cause(
        path,
        "FieldValueTypeInvalid",
        f"Invalid value: {go_value(actual)}: {path} in body must be of type {expected}: "
        f"{go_value(actual)}",
    )


def not_checked() -> Cause:
    return Cause("<nil>", "FieldValueInvalid", f"Invalid value: null: {NOT_CHECKED}")


def qualified_kind(kind: str, group: str) -> str:
    return f"{kind}.{group}" if group else kind


def qualified_resource(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def _resource_details(name: str, plural: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified_resource(plural, group)} "{name}" not found',
        details=_resource_details(name, plural, group),
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified_resource(plural, group)} "{name}" already exists',
        details=_resource_details(name, plural, group),
    )


def conflict(plural: str, group: str, name: str, detail: str | None = None) -> ApiError:
    text = detail or (
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified_resource(plural, group)} "{name}": {text}',
        details=_resource_details(name, plural, group),
    )


def refused(plural: str, group: str, name: str, detail: str) -> ApiError:
    """The 403 an admission plugin answers (apierrors.NewForbidden), e.g. PodGroupWorkloadExists
    (corpus 12-13, 12-90)."""
    return ApiError(
        403,
        "Forbidden",
        f'{qualified_resource(plural, group)} "{name}" is forbidden: {detail}',
        details=_resource_details(name, plural, group),
    )


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    parts = list(dict.fromkeys(f"{cause.field}: {cause.message}" for cause in causes))
    listed = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [cause.as_dict() for cause in causes]
    return ApiError(
        422,
        "Invalid",
        f'{qualified_kind(kind, group)} "{name}" is invalid: {listed}',
        details=details,
    )


def invalid_request() -> ApiError:
    """The generic 422 of a failed JSON-patch operation (`test` mismatch, bad index)."""
    return ApiError(422, "Invalid", INVALID_REQUEST, details={})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unsupported_media_type(message: str, *, details: bool) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message, details={} if details else None)


def expired(message: str, *, metadata: dict[str, Any] | None = None) -> ApiError:
    return ApiError(410, "Expired", message, metadata=metadata)


def too_many_requests(message: str, *, retry_after: int) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        message,
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(message: str) -> ApiError:
    return ApiError(500, "InternalError", message, details={})


def resource_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", details={})


def list_options_invalid(cause: Cause) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {cause.field}: {cause.message}',
        details={"group": "meta.k8s.io", "kind": "ListOptions", "causes": [cause.as_dict()]},
    )


def success(code: int | None, *, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Success Status; an immediate DELETE's body carries details and no code (corpus 4-10)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
    }
    if details is not None:
        body["details"] = details
    if code is not None:
        body["code"] = code
    return body
