"""ResourceSlice and claim rules the corpus notes describe (probed with dryRun on the real
server) beyond its captured cases: one error each, with the real field and message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.kubesim.conftest import Http

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
POLICY = "spec.devices[0].capacity[memory].requestPolicy"


def shared(policy: dict[str, Any], **device: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "probe"},
        "spec": {
            "driver": "part.example.com",
            "nodeName": "gpu-0",
            "pool": {"name": "probe", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "shared-gpu-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": {"value": "80Gi", "requestPolicy": policy}},
                    **device,
                }
            ],
        },
    }


RANGE = {"default": "10Gi", "validRange": {"min": "1Gi", "max": "80Gi", "step": "1Gi"}}


def plain(count: int, **device: Any) -> dict[str, Any]:
    body = shared({})
    body["spec"]["devices"] = [{"name": f"d-{i}", **device} for i in range(count)]
    return body


def taints(count: int) -> list[dict[str, Any]]:
    return [{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(count)]


def changed(policy: dict[str, Any], **change: Any) -> dict[str, Any]:
    result = copy.deepcopy(policy)
    for key, value in change.items():
        if key in ("min", "max", "step"):
            result["validRange"][key] = value
        elif value is None:
            result.pop(key)
        else:
            result[key] = value
    return result


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(
            shared(changed(RANGE, validValues=["10Gi"])),
            POLICY,
            'Forbidden: exactly one policy can be specified, cannot specify "validValues" and '
            '"validRange" at the same time',
            id="two-policies",
        ),
        pytest.param(
            shared(changed(RANGE, default="100Gi")),
            f"{POLICY}.validRange.max",
            'Invalid value: "100Gi": default is more than max: 80Gi',
            id="default-above-max",
        ),
        pytest.param(
            shared(changed(RANGE, max="100Gi")),
            f"{POLICY}.validRange.max",
            'Invalid value: "100Gi": max is larger than capacity value: 80Gi',
            id="max-above-capacity",
        ),
        pytest.param(
            shared(changed(RANGE, default="1536Mi")),
            f"{POLICY}.validRange.step",
            'Invalid value: "1536Mi": value is not a multiple of a given step (1Gi) from (1Gi)',
            id="default-off-step",
        ),
        pytest.param(
            shared(changed(RANGE, default=None)),
            f"{POLICY}.default",
            "Required value: required when validRange is defined",
            id="range-without-default",
        ),
        pytest.param(
            plain(1, taints=taints(17)),
            "spec.devices[0].taints",
            "Too many: 17: must have at most 16 items",
            id="seventeen-taints",
        ),
        pytest.param(
            plain(1, taints=[{"key": "example.com/x"}]),
            "spec.devices[0].taints[0].effect",
            "Required value",
            id="taint-without-effect",
        ),
        pytest.param(
            plain(129),
            "spec.devices",
            "Too many: 129: must have at most 128 items",
            id="129-plain-devices",
        ),
        pytest.param(
            plain(65),
            None,
            None,
            id="65-plain-devices-accepted",
        ),
    ],
)
async def test_slice_rules(
    http: Http, body: dict[str, Any], field: str | None, message: str | None
) -> None:
    code, answer, _ = await http.request("POST", SLICES, body, params={"dryRun": "All"})
    if field is None:
        assert code == 201, answer
        return
    assert code == 422, answer
    assert [(c["field"], c["message"]) for c in answer["details"]["causes"]] == [(field, message)]


async def test_claim_rules(http: Http) -> None:
    toleration = {"key": "example.com/x", "effect": "PreferNoSchedule"}
    request = {"name": "gpu", "exactly": {"deviceClassName": "x", "tolerations": [toleration]}}
    body = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [request]}}}
    code, answer, _ = await http.request("POST", CLAIMS, body)
    assert code == 422
    assert answer["details"]["causes"][0]["message"] == (
        'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", "None"'
    )
    toleration["effect"] = "NoSchedule"
    code, created, _ = await http.request("POST", CLAIMS, body)
    assert (
        code == 201
        and created["spec"]["devices"]["requests"][0]["exactly"]["tolerations"][0]["operator"]
        == "Equal"
    )
    result = {
        "request": "gpu",
        "driver": "part.example.com",
        "pool": "p",
        "device": "d",
        "shareID": "2C7A7D56-DE87-42B7-9BC9-52F9FB94DB96",
    }
    allocation = {"devices": {"results": [result]}, "allocationTimestamp": "2026-12-01T14:05:23Z"}
    code, answer, _ = await http.request(
        "PATCH",
        f"{CLAIMS}/c/status",
        {"status": {"allocation": allocation}},
        content_type="application/merge-patch+json",
    )
    assert code == 422
    assert "lowercase hexadecimal characters" in answer["details"]["causes"][0]["message"]
