"""JSON type checks of built-in kinds, the part of decoding a Go server does before validating.

Owns the expected JSON types of the fields the emulator reads (ObjectMeta and the specs of
pods, events, leases, DRA objects, Workloads, PodGroups, services, nodes and CRDs), so a
wrongly typed field is a 400 decode error with the field's path instead of a failure deep in
validation. Unknown fields are not this module's business (see `Strategy.prune`); custom
resources are typed by their own schema.
"""

from __future__ import annotations

from typing import Any

from gangq.queue.kubesim import status

Shape = Any
"""A JSON type name, a dict of field shapes (an object), a one-element list (an array of that
shape) or ("map", shape) for an object with arbitrary keys."""

STRING, INTEGER, BOOLEAN, NUMBER, OBJECT, ARRAY = (
    "string",
    "integer",
    "boolean",
    "number",
    "object",
    "array",
)
QUANTITY = "quantity"
"""A resource quantity: "1500m", "80Gi" or a plain number."""
STRINGS = ("map", STRING)
CEL_SELECTORS = [{"cel": {"expression": STRING}}]

OWNER_REFERENCE = {
    "apiVersion": STRING,
    "kind": STRING,
    "name": STRING,
    "uid": STRING,
    "controller": BOOLEAN,
    "blockOwnerDeletion": BOOLEAN,
}
OBJECT_META = {
    "name": STRING,
    "generateName": STRING,
    "namespace": STRING,
    "uid": STRING,
    "resourceVersion": STRING,
    "generation": INTEGER,
    "labels": STRINGS,
    "annotations": STRINGS,
    "finalizers": [STRING],
    "ownerReferences": [OWNER_REFERENCE],
    "deletionGracePeriodSeconds": INTEGER,
}
CONTAINER = {
    "name": STRING,
    "image": STRING,
    "resources": {
        "requests": ("map", QUANTITY),
        "limits": ("map", QUANTITY),
        "claims": [{"name": STRING}],
    },
    "env": [{"name": STRING}],
    "ports": [OBJECT],
    "command": [STRING],
    "args": [STRING],
}
POD_SPEC = {
    "containers": [CONTAINER],
    "initContainers": [CONTAINER],
    "schedulingGates": [{"name": STRING}],
    "nodeName": STRING,
    "nodeSelector": STRINGS,
    "tolerations": [OBJECT],
    "affinity": OBJECT,
    "resourceClaims": [
        {"name": STRING, "resourceClaimName": STRING, "resourceClaimTemplateName": STRING}
    ],
    "priority": INTEGER,
    "terminationGracePeriodSeconds": INTEGER,
    "activeDeadlineSeconds": INTEGER,
    "restartPolicy": STRING,
    "schedulerName": STRING,
    "volumes": [OBJECT],
    "schedulingGroup": {"podGroupName": STRING},
}
DEVICE_REQUEST = {
    "deviceClassName": STRING,
    "count": INTEGER,
    "allocationMode": STRING,
    "selectors": CEL_SELECTORS,
    "adminAccess": BOOLEAN,
    "name": STRING,
}
CLAIM_SPEC = {
    "devices": {
        "requests": [
            {"name": STRING, "exactly": DEVICE_REQUEST, "firstAvailable": [DEVICE_REQUEST]}
        ],
        "constraints": [{"requests": [STRING], "matchAttribute": STRING}],
        "config": [OBJECT],
    }
}
SCHEDULING_POLICY = {"basic": OBJECT, "gang": {"minCount": INTEGER}}
REFERENCE = {
    "kind": STRING,
    "namespace": STRING,
    "name": STRING,
    "uid": STRING,
    "apiVersion": STRING,
}

SHAPES: dict[str, dict[str, Shape]] = {
    "/pods": {"spec": POD_SPEC, "status": OBJECT},
    "/events": {
        "involvedObject": REFERENCE,
        "related": REFERENCE,
        "reason": STRING,
        "message": STRING,
        "type": STRING,
        "count": INTEGER,
        "source": OBJECT,
        "action": STRING,
        "reportingComponent": STRING,
        "reportingInstance": STRING,
    },
    "events.k8s.io/events": {
        "regarding": REFERENCE,
        "related": REFERENCE,
        "reason": STRING,
        "note": STRING,
        "type": STRING,
        "action": STRING,
        "reportingController": STRING,
        "reportingInstance": STRING,
        "deprecatedCount": INTEGER,
    },
    "coordination.k8s.io/leases": {
        "spec": {
            "holderIdentity": STRING,
            "leaseDurationSeconds": INTEGER,
            "leaseTransitions": INTEGER,
            "acquireTime": STRING,
            "renewTime": STRING,
        }
    },
    "resource.k8s.io/resourceclaims": {
        "spec": CLAIM_SPEC,
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": STRING, "driver": STRING, "pool": STRING, "device": STRING}
                    ]
                },
                "nodeSelector": OBJECT,
                "allocationTimestamp": STRING,
            },
            "reservedFor": [{"resource": STRING, "name": STRING, "uid": STRING}],
        },
    },
    "resource.k8s.io/resourceclaimtemplates": {"spec": {"metadata": OBJECT, "spec": CLAIM_SPEC}},
    "resource.k8s.io/deviceclasses": {"spec": {"selectors": CEL_SELECTORS, "config": [OBJECT]}},
    "resource.k8s.io/resourceslices": {
        "spec": {
            "driver": STRING,
            "nodeName": STRING,
            "allNodes": BOOLEAN,
            "pool": {"name": STRING, "generation": INTEGER, "resourceSliceCount": INTEGER},
            "devices": [
                {
                    "name": STRING,
                    "attributes": ("map", OBJECT),
                    "capacity": ("map", OBJECT),
                    "taints": [OBJECT],
                }
            ],
        }
    },
    "scheduling.k8s.io/workloads": {
        "spec": {
            "controllerRef": {"apiGroup": STRING, "kind": STRING, "name": STRING},
            "podGroupTemplates": [
                {
                    "name": STRING,
                    "schedulingPolicy": SCHEDULING_POLICY,
                    "schedulingConstraints": OBJECT,
                }
            ],
        }
    },
    "scheduling.k8s.io/podgroups": {
        "spec": {
            "podGroupTemplateRef": {
                "workload": {"workloadName": STRING, "podGroupTemplateName": STRING}
            },
            "schedulingPolicy": SCHEDULING_POLICY,
            "disruptionMode": STRING,
            "resourceClaims": [
                {"name": STRING, "resourceClaimName": STRING, "resourceClaimTemplateName": STRING}
            ],
        },
        "status": {"conditions": [OBJECT]},
    },
    "/services": {
        "spec": {"ports": [OBJECT], "clusterIP": STRING, "selector": STRINGS, "type": STRING}
    },
    "/nodes": {
        "spec": {
            "taints": [{"key": STRING, "value": STRING, "effect": STRING}],
            "unschedulable": BOOLEAN,
        },
        "status": {
            "allocatable": ("map", QUANTITY),
            "capacity": ("map", QUANTITY),
            "conditions": [OBJECT],
        },
    },
    "/namespaces": {"spec": OBJECT, "status": OBJECT},
    "/configmaps": {"data": STRINGS},
    "apiextensions.k8s.io/customresourcedefinitions": {
        "spec": {
            "group": STRING,
            "scope": STRING,
            "names": {
                "plural": STRING,
                "singular": STRING,
                "kind": STRING,
                "listKind": STRING,
                "shortNames": [STRING],
                "categories": [STRING],
            },
            "versions": [
                {
                    "name": STRING,
                    "served": BOOLEAN,
                    "storage": BOOLEAN,
                    "schema": OBJECT,
                    "subresources": OBJECT,
                    "additionalPrinterColumns": [OBJECT],
                    "selectableFields": [OBJECT],
                }
            ],
        }
    },
}


_TYPES: dict[type, str] = {bool: BOOLEAN, int: INTEGER, float: NUMBER, str: STRING, list: ARRAY}


def _json_type(value: Any) -> str:
    return _TYPES.get(type(value), OBJECT)


def _expected(shape: Shape) -> str:
    if isinstance(shape, str):
        return shape
    return ARRAY if isinstance(shape, list) else OBJECT


def mismatch(value: Any, shape: Shape, path: str) -> tuple[str, str, str] | None:
    """(path, found type, expected type) of the first wrongly typed field, or None.

    Every write of the emulator passes here: the walk builds no path while all is well (the
    steps of the path are collected on the way back from a mismatch)."""
    found = _walk(value, shape)
    if found is None:
        return None
    steps, found_type, expected = found
    for step in reversed(steps):
        path = _step(path, step)
    return path, found_type, expected


def _step(path: str, step: str | int) -> str:
    if isinstance(step, int):
        return f"{path}[{step}]"
    return f"{path}.{step}" if path else step


def _walk(value: Any, shape: Shape) -> tuple[list[str | int], str, str] | None:
    if value is None:
        return None
    expected, found = _expected(shape), _TYPES.get(type(value), OBJECT)
    if expected == QUANTITY:
        return None if found in (STRING, INTEGER, NUMBER) else ([], found, STRING)
    if found != expected and not (expected == NUMBER and found == INTEGER):
        return [], found, expected
    error: tuple[list[str | int], str, str] | None
    if isinstance(shape, list):
        for index, item in enumerate(value):
            error = _walk(item, shape[0])
            if error is not None:
                error[0].append(index)
                return error
    elif isinstance(shape, tuple):
        for key, item in value.items():
            error = _walk(item, shape[1])
            if error is not None:
                error[0].append(key)
                return error
    elif isinstance(shape, dict):
        for key, child in shape.items():
            if key in value:
                error = _walk(value[key], child)
                if error is not None:
                    error[0].append(key)
                    return error
    return None


def check(resource: str, kind: str, version: str, obj: dict[str, Any]) -> None:
    """Raise the 400 a Go decoder answers for a field of the wrong JSON type."""
    shape = {"metadata": OBJECT_META, **SHAPES.get(resource, {})}
    found = mismatch(obj, shape, "")
    if found is None:
        return
    path, actual, expected = found
    raise status.bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{actual} into Go struct field {kind}.{path} of type {expected}"
    )
