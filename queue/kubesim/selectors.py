"""Label and field selectors as the API server parses and applies them.

Owns the selector grammar (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`), the
parse errors' wording and matching against JSON objects. Which field labels a resource supports
is the caller's knowledge (`kinds.ResourceType.supports_field`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gangq.queue.kubesim import status

_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    """One of `=`, `!=`, `in`, `notin`, `exists`, `!`."""
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            break
        if match.group(1):
            tokens.append(match.group(1))
        position = match.end()
        if not text[position:].strip():
            break
    return tokens


def _parse_error(message: str) -> status.ApiError:
    return status.bad_request(f"unable to parse requirement: {message}")


def _set_values(tokens: list[str], index: int) -> tuple[tuple[str, ...], int]:
    if index >= len(tokens) or tokens[index] != "(":
        found = tokens[index] if index < len(tokens) else ""
        raise _parse_error(f"found '{found}', expected: '('")
    values: list[str] = []
    index += 1
    while True:
        token = tokens[index] if index < len(tokens) else ""
        if token == ")":
            return tuple(values), index + 1
        if token == ",":
            values.append("")
            index += 1
            continue
        if token in ("", "(", "!", "=", "==", "!="):
            raise _parse_error(f"found '{token}', expected: ',', ')' or identifier")
        values.append(token)
        index += 1
        following = tokens[index] if index < len(tokens) else ""
        if following == ",":
            index += 1
        elif following != ")":
            raise _parse_error(f"found '{following}', expected: ',' or ')'")


def parse_labels(text: str) -> list[Requirement]:
    """Parse a label selector; an empty selector matches everything."""
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "!":
            key = tokens[index + 1] if index + 1 < len(tokens) else ""
            if not key or key in ("(", ")", ","):
                raise _parse_error(f"found '{key}', expected: identifier")
            requirements.append(Requirement(key, "!"))
            index += 2
        else:
            key = token
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            if following in ("=", "==", "!="):
                value = tokens[index + 2] if index + 2 < len(tokens) else ""
                if value in (",", "(", ")"):
                    value = ""
                    index += 2
                else:
                    index += 3 if value else 2
                operator = "!=" if following == "!=" else "="
                requirements.append(Requirement(key, operator, (value,)))
            elif following in ("in", "notin"):
                values, index = _set_values(tokens, index + 2)
                requirements.append(Requirement(key, following, values))
            elif following in ("", ","):
                requirements.append(Requirement(key, "exists"))
                index += 1
            else:
                raise _parse_error(f"found '{following}', expected: '=', '!=', '==', 'in', notin'")
        if index < len(tokens):
            if tokens[index] != ",":
                raise _parse_error(f"found '{tokens[index]}', expected: ','")
            index += 1
    return requirements


def labels_match(requirements: list[Requirement], obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(requirement.matches(labels) for requirement in requirements)


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    label: str
    value: str
    negated: bool

    def matches(self, obj: dict[str, Any]) -> bool:
        return (field_value(obj, self.label) == self.value) != self.negated


def field_value(obj: dict[str, Any], label: str) -> str:
    """A field label's value as a string; a missing field is the empty string."""
    current: Any = obj
    for part in label.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def parse_fields(
    text: str, *, supports: Callable[[str], bool], resource: str | None = None
) -> list[FieldRequirement]:
    """`resource` ("<group>/<version>, Kind=<Kind>") appears in the error of built-in groups."""
    requirements: list[FieldRequirement] = []
    for term in (part.strip() for part in text.split(",")):
        if not term:
            continue
        for operator in ("!=", "==", "="):
            if operator in term:
                label, _, value = term.partition(operator)
                break
        else:
            raise status.bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        label = label.strip()
        if not supports(label):
            where = f" for {resource}" if resource else ""
            raise status.bad_request(f"field label not supported{where}: {label}")
        requirements.append(FieldRequirement(label, value.strip(), operator == "!="))
    return requirements


def fields_match(requirements: list[FieldRequirement], obj: dict[str, Any]) -> bool:
    return all(requirement.matches(obj) for requirement in requirements)
