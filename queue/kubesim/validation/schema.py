"""Structural-schema handling of custom resources: pruning, defaults, validation, CEL rules.

Owns what apiextensions-apiserver does with a CRD's openAPIV3Schema: drop unknown fields
(unless `x-kubernetes-preserve-unknown-fields`), apply `default`s, check types, enum, bounds,
lengths, patterns, required properties, list-type map/set uniqueness, then evaluate
`x-kubernetes-validations` rules (`self`, `oldSelf`, `has()`) with the `cel` library, with the
real server's wording. It must not know any particular CRD.
"""

from __future__ import annotations

import json
import re
from typing import Any

import cel

from gangq.queue.kubesim import status
from gangq.queue.kubesim.clone import clone

_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_PROGRAMS: dict[str, cel.Program] = {}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(value: Any, schema: dict[str, Any], path: str = "", *, root: bool = False) -> list[str]:
    """Remove fields the schema does not declare; returns their paths (for Warning headers)."""
    unknown: list[str] = []
    if isinstance(value, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key in list(value):
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            child = (properties or {}).get(key)
            if child is None and isinstance(additional, dict):
                child = additional
            if child is None:
                unknown.append(_join(path, key))
                del value[key]
            elif value[key] is None and not child.get("nullable"):
                del value[key]
            else:
                unknown += prune(value[key], child, _join(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            unknown += prune(item, schema["items"], f"{path}[{index}]")
    return unknown


def apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, child in (schema.get("properties") or {}).items():
            if key not in value and "default" in child:
                value[key] = clone(child["default"])
            if key in value:
                apply_defaults(value[key], child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


def _type_causes(value: Any, schema: dict[str, Any], path: str) -> list[status.Cause] | None:
    """Type errors, or None when the value has the declared type."""
    expected = schema.get("type")
    actual = _type_name(value)
    if not expected or actual == expected or (expected == "number" and actual == "integer"):
        return None
    if value is None and schema.get("nullable"):
        return None
    causes = [status.type_invalid(path, actual, expected)]
    if expected == "integer" and actual == "number":
        causes.append(
            status.Cause(
                "<nil>",
                "FieldValueInvalid",
                'Invalid value: "": Checked value must be of type integer (default format) '
                f"in {path}",
            )
        )
    return causes


def _scalar_causes(value: Any, schema: dict[str, Any], path: str) -> list[status.Cause]:
    causes: list[status.Cause] = []
    if "enum" in schema and value not in schema["enum"]:
        causes.append(status.not_supported(path, value, list(schema["enum"])))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(
                status.invalid_value(
                    path,
                    value,
                    f"{path} in body should be greater than or equal to {schema['minimum']}",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(
                status.invalid_value(
                    path,
                    value,
                    f"{path} in body should be less than or equal to {schema['maximum']}",
                )
            )
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(status.too_long(path, int(schema["maxLength"])))
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(
                status.invalid_value(
                    path,
                    value,
                    f"{path} in body should be at least {schema['minLength']} chars long",
                )
            )
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            causes.append(
                status.invalid_value(
                    path, value, f"{path} in body should match '{schema['pattern']}'"
                )
            )
        if schema.get("format") == "date-time" and not _DATE_TIME.fullmatch(value):
            causes.append(
                status.invalid_value(
                    path, value, f"{path} in body must be of type date-time: {json.dumps(value)}"
                )
            )
    return causes


def _array_causes(value: list[Any], schema: dict[str, Any], path: str) -> list[status.Cause]:
    causes: list[status.Cause] = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        causes.append(status.too_many(path, len(value), int(schema["maxItems"])))
    if "minItems" in schema and len(value) < schema["minItems"]:
        causes.append(
            status.invalid_value(
                path, value, f"{path} in body should have at least {schema['minItems']} items"
            )
        )
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            causes += validate(item, items, f"{path}[{index}]")
    return causes


def validate(value: Any, schema: dict[str, Any], path: str = "") -> list[status.Cause]:
    """Schema errors in the order the real server lists them: properties, then required."""
    type_errors = _type_causes(value, schema, path)
    if type_errors is not None:
        return type_errors
    causes = _scalar_causes(value, schema, path)
    if isinstance(value, list):
        causes += _array_causes(value, schema, path)
    elif isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, child in properties.items():
            if key in value:
                causes += validate(value[key], child, _join(path, key))
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key, item in value.items():
                if key not in properties:
                    causes += validate(item, additional, _join(path, key))
        for key in schema.get("required") or []:
            if key not in value:
                causes.append(status.required(_join(path, key)))
    return causes


def list_causes(value: Any, schema: dict[str, Any], path: str = "") -> list[status.Cause]:
    """Uniqueness of `x-kubernetes-list-type` map keys and set items (checked apart from the
    schema, so a duplicate does not keep CEL rules from running)."""
    causes: list[status.Cause] = []
    if isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in value:
                causes += list_causes(value[name], child, _join(path, name))
        return causes
    if not isinstance(value, list):
        return causes
    list_type = schema.get("x-kubernetes-list-type")
    seen: list[Any] = []
    for index, item in enumerate(value):
        if list_type == "map" and isinstance(item, dict):
            key: Any = {
                name: item.get(name) for name in schema.get("x-kubernetes-list-map-keys") or []
            }
        elif list_type == "set":
            key = item
        else:
            break
        if key in seen:
            causes.append(status.duplicate(f"{path}[{index}]", key))
        seen.append(key)
    if isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            causes += list_causes(item, schema["items"], f"{path}[{index}]")
    return causes


BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
"""Error kinds after which the real server skips CEL rules and says so in an extra cause."""


def has_rules(schema: Any) -> bool:
    if isinstance(schema, dict):
        return bool(schema.get("x-kubernetes-validations")) or any(
            has_rules(v) for v in schema.values()
        )
    if isinstance(schema, list):
        return any(has_rules(item) for item in schema)
    return False


def _program(rule: str) -> cel.Program:
    program = _PROGRAMS.get(rule)
    if program is None:
        program = cel.compile(rule)
        _PROGRAMS[rule] = program
    return program


def _rule_cause(
    rule: dict[str, Any], value: Any, schema: dict[str, Any], path: str
) -> status.Cause:
    field = path + str(rule.get("fieldPath", "")) if rule.get("fieldPath") else path
    field = field or "<nil>"  # a rule of the schema's root has no field path
    message = str(rule.get("message") or f"failed rule: {rule.get('rule')}")
    reason = str(rule.get("reason") or "FieldValueInvalid")
    if schema.get("type") in ("object", "array"):
        return status.Cause(field, reason, f"Invalid value: {message}")
    return status.Cause(field, reason, f"Invalid value: {status.go_value(value)}: {message}")


def rule_causes(
    value: Any, old: Any, schema: dict[str, Any], path: str = "", *, has_old: bool = False
) -> list[status.Cause]:
    """Evaluate x-kubernetes-validations; transition rules (oldSelf) only run on updates."""
    causes: list[status.Cause] = []
    for rule in schema.get("x-kubernetes-validations") or []:
        text = str(rule.get("rule", ""))
        uses_old = "oldSelf" in text
        if uses_old and not has_old:
            continue
        context = {"self": value, "oldSelf": old} if uses_old else {"self": value}
        try:
            passed = _program(text).execute(context)
        except (ValueError, TypeError, KeyError) as error:
            causes.append(status.invalid_value(path, None, f"rule evaluation error: {error}"))
            continue
        if passed is not True:
            causes.append(_rule_cause(rule, value, schema, path))
    if isinstance(value, dict):
        for key, child in (schema.get("properties") or {}).items():
            if key in value:
                old_child = old.get(key) if isinstance(old, dict) else None
                child_has_old = has_old and isinstance(old, dict) and key in old
                causes += rule_causes(
                    value[key], old_child, child, _join(path, key), has_old=child_has_old
                )
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys") or []
        previous = (
            {json.dumps([o.get(k) for k in keys]): o for o in old or [] if isinstance(o, dict)}
            if keys and isinstance(old, list)
            else {}
        )
        for index, item in enumerate(value):
            match = (
                previous.get(json.dumps([item.get(k) for k in keys]))
                if keys and isinstance(item, dict)
                else None
            )
            causes += rule_causes(
                item, match, schema["items"], f"{path}[{index}]", has_old=match is not None
            )
    return causes
