"""Structural-schema handling of custom resources (pure functions, no server)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangq.queue.kubesim import patch, selectors
from gangq.queue.kubesim.validation import schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.limit) || self.limit >= self.floor",
                    "message": "limit below floor",
                    "fieldPath": ".limit",
                },
            ],
            "properties": {
                "name": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "immutable"}
                    ],
                },
                "floor": {"type": "integer", "default": 2},
                "limit": {"type": "integer", "nullable": True},
                "labels": {
                    "type": "object",
                    "additionalProperties": {"type": "string", "maxLength": 3},
                },
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"size": {"type": "integer", "default": 1}},
                    },
                },
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    },
}


def _checked(spec: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    body = {"spec": spec}
    schema.apply_defaults(body, SCHEMA)
    causes = schema.validate(body, SCHEMA) + schema.list_causes(body, SCHEMA)
    if not causes:
        causes = schema.rule_causes(
            body, None if old is None else {"spec": old}, SCHEMA, has_old=old is not None
        )
    return [(cause.field, cause.message) for cause in causes]


def test_pruning_keeps_preserved_subtrees_and_reports_paths() -> None:
    body = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {},
        "spec": {"name": "a", "bogus": 1, "free": {"any": [1]}},
        "top": 2,
    }
    assert schema.prune(body, SCHEMA, root=True) == ["spec.bogus", "top"]
    assert body["spec"] == {"name": "a", "free": {"any": [1]}}


def test_null_is_kept_only_where_the_schema_allows_it() -> None:
    body: dict[str, Any] = {"spec": {"limit": None, "floor": None}}
    assert schema.prune(body, SCHEMA) == []
    assert body == {"spec": {"limit": None}}


def test_defaults_reach_into_array_items() -> None:
    body: dict[str, Any] = {"spec": {"items": [{}, {"size": 5}]}}
    schema.apply_defaults(body, SCHEMA)
    assert body["spec"] == {"floor": 2, "items": [{"size": 1}, {"size": 5}]}


@pytest.mark.parametrize(
    ("spec", "old", "expected"),
    [
        pytest.param({"name": "a", "limit": 3}, None, [], id="valid"),
        pytest.param(
            {"name": "a", "limit": 1},
            None,
            [("spec.limit", "Invalid value: limit below floor")],
            id="object-rule-with-field-path",
        ),
        pytest.param(
            {"name": "b"},
            {"name": "a"},
            [("spec.name", 'Invalid value: "b": immutable')],
            id="transition-rule",
        ),
        pytest.param({"name": "b"}, None, [], id="transition-rule-skipped-on-create"),
        pytest.param(
            {"labels": {"k": "long"}},
            None,
            [("spec.labels.k", "Too long: may not be more than 3 bytes")],
            id="additional-properties",
        ),
    ],
)
def test_validation(
    spec: dict[str, Any], old: dict[str, Any] | None, expected: list[tuple[str, str]]
) -> None:
    assert _checked(spec, old) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
documents = st.dictionaries(st.text(min_size=1, max_size=3), json_values, max_size=4)


@settings(max_examples=60, deadline=None)
@given(documents, documents)
def test_merge_patch_sets_every_non_null_key_and_drops_null_ones(
    target: dict[str, Any], document: dict[str, Any]
) -> None:
    merged = patch.merge_patch(target, document)
    for key, value in document.items():
        if value is None:
            assert key not in merged
        elif not isinstance(value, dict):
            assert merged[key] == value
    assert patch.merge_patch(merged, document) == merged


@settings(max_examples=60, deadline=None)
@given(documents, st.text(min_size=1, max_size=3), json_values)
def test_json_patch_add_then_remove_restores_the_document(
    target: dict[str, Any], key: str, value: Any
) -> None:
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    if key in target:
        return
    added = patch.json_patch(target, [{"op": "add", "path": pointer, "value": value}])
    assert patch.json_patch(added, [{"op": "remove", "path": pointer}]) == target


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["", "x", "y"]), max_size=3)
)
def test_label_selector_set_operators_agree_with_equality(labels: dict[str, str]) -> None:
    obj = {"metadata": {"labels": labels}}
    in_set = selectors.labels_match(selectors.parse_labels("a in (x,y)"), obj)
    either = labels.get("a") in ("x", "y")
    assert in_set == either
    assert selectors.labels_match(selectors.parse_labels("a notin (x,y)"), obj) == (not either)
    assert selectors.labels_match(selectors.parse_labels("!a"), obj) == ("a" not in labels)
