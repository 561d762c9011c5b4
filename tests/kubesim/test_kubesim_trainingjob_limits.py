"""Bad TrainingJobs the CRD refuses at apply time: names gangq could not derive objects from,
integers out of the 32-bit range, unbounded priority (through the emulator's CRD validation)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Http

PATH = "/apis/gangq.dev/v1alpha1/namespaces/default/trainingjobs"
SPEC = {"tier": "training", "replicas": 1, "devicesPerReplica": 1, "template": {}}
NAME_LENGTH = (
    "Invalid value: metadata.name must be at most 60 characters: pods and their hostnames are "
    "named <name>-<replica>, a DNS label of at most 63"
)
NAME_SHAPE = (
    "Invalid value: metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', "
    "starting with a letter): the job's headless Service is named after it"
)


def _job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": SPEC | spec,
    }


async def test_a_name_of_60_characters_is_the_longest_accepted(http: Http) -> None:
    code, body, _ = await http.request("POST", PATH, _job("a" * 60))
    assert code == 201, body


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        pytest.param("a" * 61, [NAME_LENGTH], id="61-characters"),
        pytest.param("j" * 64, [NAME_LENGTH], id="64-characters"),
        pytest.param("0train", [NAME_SHAPE], id="starts-with-a-digit"),
        pytest.param("train.v2", [NAME_SHAPE], id="dotted"),
        pytest.param("a." + "b" * 99, [NAME_LENGTH, NAME_SHAPE], id="100-characters-dotted"),
    ],
)
async def test_names_gangq_cannot_build_pods_or_a_service_from_are_refused(
    http: Http, name: str, messages: list[str]
) -> None:
    code, body, _ = await http.request("POST", PATH, _job(name))
    assert code == 422
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": "<nil>", "message": message}
        for message in messages
    ]
    code, _, _ = await http.request("GET", f"{PATH}/{name}")
    assert code == 404


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        pytest.param("maxRuntimeSeconds", 2**31, "less than or equal to 2147483647", id="runtime"),
        pytest.param(
            "startupTimeoutSeconds", 2**31, "less than or equal to 2147483647", id="startup"
        ),
        pytest.param("devicesPerReplica", 2**31, "less than or equal to 2147483647", id="devices"),
        pytest.param("maxRestarts", 2**31, "less than or equal to 2147483647", id="restarts"),
        pytest.param("priority", 10**9 + 1, "less than or equal to 1000000000", id="priority-max"),
        pytest.param(
            "priority", -(10**9) - 1, "greater than or equal to -1000000000", id="priority-min"
        ),
    ],
)
async def test_integers_out_of_range_are_refused_and_printed_as_integers(
    http: Http, field: str, value: int, limit: str
) -> None:
    extra: dict[str, Any] = {field: value}
    if field == "startupTimeoutSeconds":
        extra["maxRuntimeSeconds"] = 2**31 - 1
    code, body, _ = await http.request("POST", PATH, _job("big", **extra))
    assert code == 422
    (cause,) = [c for c in body["details"]["causes"] if c["field"] == f"spec.{field}"]
    assert cause["message"] == f"Invalid value: {value}: spec.{field} in body should be {limit}"
    assert ".0" not in body["message"]


@pytest.mark.parametrize(
    ("minimum", "limit"),
    [
        pytest.param(0, "greater than or equal to 1", id="zero"),
        pytest.param(65, "less than or equal to 64", id="above-the-most-replicas"),
    ],
)
async def test_an_elastic_minimum_out_of_range_is_refused(
    http: Http, minimum: int, limit: str
) -> None:
    """The CRD bounds `spec.elastic.minReplicas` as it bounds `replicas`; one above the job's
    own `replicas` is refused by gangq's intake, which names both."""
    code, body, _ = await http.request(
        "POST", PATH, _job("elastic", replicas=4, elastic={"minReplicas": minimum})
    )
    assert code == 422
    (cause,) = body["details"]["causes"]
    assert cause["field"] == "spec.elastic.minReplicas"
    assert cause["message"] == (
        f"Invalid value: {minimum}: spec.elastic.minReplicas in body should be {limit}"
    )


async def test_an_elastic_job_needs_its_minimum(http: Http) -> None:
    code, body, _ = await http.request("POST", PATH, _job("elastic", replicas=4, elastic={}))
    assert code == 422
    required = {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.elastic.minReplicas",
    }
    assert required in body["details"]["causes"]
    code, body, _ = await http.request(
        "POST", PATH, _job("elastic", replicas=4, elastic={"minReplicas": 2})
    )
    assert code == 201, body
