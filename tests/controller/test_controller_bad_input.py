"""Bad input ends fast and says why: invalid jobs end Failed, never-fit jobs say what must
change; both hold no reservation and REST explains them with the status's own words."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.config import QuotaConfig, TenantConfig
from gangq.queue.kube import resources
from tests.controller import bad_input
from tests.controller.conftest import CRD, Harness, running_harness, training_job
from tests.controller.conftest import wait_for as wait_until

PRODUCT = 'device.attributes["gpu.nvidia.com"].productName'


@pytest.fixture
async def lax_harness(engine: AsyncEngine, tmp_path: Path) -> AsyncIterator[Harness]:
    """A cluster whose TrainingJob CRD lacks the name rules and the 32-bit maxima (a CRD from
    before them): what it lets through must be refused by the controller itself."""
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema.pop("x-kubernetes-validations")
    for field in schema["properties"]["spec"]["properties"].values():
        field.pop("maximum", None)
        field.pop("minimum", None)
    lax = tmp_path / "trainingjob.yaml"
    lax.write_text(yaml.safe_dump(crd))
    async with running_harness(engine, crds=(lax,)) as built:
        yield built


async def _refused(
    harness: Harness, database_url: str, tmp_path: Path, *, name: str, namespace: str
) -> dict[str, Any]:
    """Waits for the job to end Failed for its spec and checks every place that shows it."""
    await wait_until(lambda: harness.phase(name, namespace) == "Failed")
    shown = bad_input.status_of(harness, name, namespace)
    admissible = bad_input.condition(harness, name, namespace, "Admissible")
    assert (admissible["status"], admissible["reason"]) == ("False", "InvalidSpec")
    assert shown["reason"].startswith("invalid: ")
    assert shown.get("queuePosition") is None and shown.get("placement") == []
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, namespace, name)
    assert out["phase"] == "Failed"
    assert out["reason"] == {"code": "invalid", "message": shown["reason"]}
    assert out["queuePosition"] is None and out["placement"] == []
    counts = await bad_input.stored(harness.engine, namespace, name)
    assert counts.get("reservations") == 0 and counts.get("failed") == 1, counts
    assert "admitted" not in counts
    assert len(bad_input.kube_events(harness, name, namespace, "InvalidSpec")) == 1
    assert not harness.objects(resources.PODS, namespace)
    assert not harness.objects(resources.RESOURCE_CLAIMS, namespace)
    return shown


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            (
                "orphan",
                "unlabelled",
                {},
                "invalid: namespace unlabelled has no gangq.dev/tenant label",
            ),
            id="no-tenant",
        ),
        pytest.param(
            (
                "weird",
                "ml-train",
                {"tier": "nightly"},
                "invalid: spec.tier: unknown tier 'nightly' (known: prod-inference, training, "
                "small)",
            ),
            id="unknown-tier",
        ),
        pytest.param(
            (
                "fpga",
                "ml-train",
                {"deviceClassName": "fpga.example.com"},
                "invalid: spec.deviceClassName: device class 'fpga.example.com' is not managed by "
                "gangq (managed: gpu.nvidia.com)",
            ),
            id="unknown-device-class",
        ),
        pytest.param(
            (
                "cel",
                "ml-train",
                {"selectors": ["device.driver =="]},
                "invalid: spec.selectors: CEL selector 'device.driver ==': ERROR",
            ),
            id="invalid-cel",
        ),
        pytest.param(
            (
                "elastic",
                "ml-train",
                {"replicas": 2, "elastic": {"minReplicas": 3}},
                "invalid: spec.elastic.minReplicas: 3 is more than spec.replicas 2, the most the "
                "job runs at",
            ),
            id="elastic-minimum-above-replicas",
        ),
    ],
)
async def test_an_invalid_job_ends_failed_with_its_reason_and_holds_nothing(
    harness: Harness, database_url: str, tmp_path: Path, case: tuple[str, str, dict[str, Any], str]
) -> None:
    name, namespace, spec, said = case
    harness.start()
    body = training_job(name, namespace=namespace, **spec)
    body["spec"].update(spec)
    await harness.kube.create(resources.TRAINING_JOBS, namespace, body)
    shown = await _refused(harness, database_url, tmp_path, name=name, namespace=namespace)
    assert shown["reason"].startswith(said)


@pytest.mark.parametrize(
    ("name", "spec", "said"),
    [
        pytest.param(
            "j" * 63,
            {},
            "invalid: metadata.name is 63 characters, at most 60: pods and their hostnames are "
            "named <name>-<replica>, a DNS label of at most 63",
            id="name-63",
        ),
        pytest.param(
            "j" * 64,
            {},
            "invalid: metadata.name is 64 characters, at most 60",
            id="name-64",
        ),
        pytest.param(
            "train.v2",
            {},
            "invalid: metadata.name 'train.v2' must be a DNS-1035 label",
            id="name-dotted",
        ),
        pytest.param(
            "long-runtime",
            {"maxRuntimeSeconds": 2**31},
            "invalid: spec.maxRuntimeSeconds: Input should be less than or equal to 2147483647",
            id="runtime-32-bit",
        ),
        pytest.param(
            "high-priority",
            {"priority": 2**31},
            "invalid: spec.priority: Input should be less than or equal to 1000000000",
            id="priority-bound",
        ),
    ],
)
async def test_what_a_lax_crd_lets_through_is_refused_before_anything_is_reserved(
    lax_harness: Harness,
    database_url: str,
    tmp_path: Path,
    name: str,
    spec: dict[str, Any],
    *,
    said: str,
) -> None:
    harness = lax_harness
    harness.start()
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", training_job(name, **spec))
    shown = await _refused(harness, database_url, tmp_path, name=name, namespace="ml-train")
    assert shown["reason"].startswith(said)
    assert ".0" not in shown["reason"]


async def test_fixing_the_spec_of_an_invalid_job_queues_it_again(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    harness.start()
    body = training_job("typo", replicas=1, run_seconds=None, selectors=["device.driver =="])
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await _refused(harness, database_url, tmp_path, name="typo", namespace="ml-train")
    patch = {"spec": {"selectors": ['device.driver == "gpu.nvidia.com"']}}
    await harness.kube.patch(resources.TRAINING_JOBS, "ml-train", "typo", patch)
    await wait_until(lambda: harness.phase("typo") == "Running")
    admissible = bad_input.condition(harness, "typo", "ml-train", "Admissible")
    assert (admissible["status"], admissible["reason"]) == ("True", "Valid")
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "ml-train", "typo")
    assert out["phase"] == "Running" and out["reason"] is None
    counts = await bad_input.stored(harness.engine, "ml-train", "typo")
    assert (counts["failed"], counts["requeued"], counts["admitted"]) == (1, 1, 1)


async def _never_fits(
    harness: Harness, database_url: str, tmp_path: Path, *, name: str, said: str
) -> None:
    """The job stays visible and Queued, out of line, holding nothing, and says why."""
    await wait_until(
        lambda: bad_input.status_of(harness, name, "ml-train").get("reason", "").startswith(said)
    )
    shown = bad_input.status_of(harness, name, "ml-train")
    assert shown["phase"] == "Queued" and shown.get("queuePosition") is None
    schedulable = bad_input.condition(harness, name, "ml-train", "Schedulable")
    assert (schedulable["status"], schedulable["reason"]) == ("False", "NeverFits")
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "ml-train", name)
        queues = (await api.get("/v1/queues")).json()
    assert out["phase"] == "Queued"
    assert out["reason"] == {"code": "unschedulable", "message": shown["reason"]}
    assert out["queuePosition"] is None and out["reservedStartAt"] is None
    # counted apart from the jobs that wait: it waits for nothing
    row = next(q for q in queues if (q["tier"], q["tenant"]) == ("training", "ml-train"))
    assert (row["pending"], row["unschedulable"], row["oldestWaitSeconds"]) == (0, 1, None)
    await wait_until(lambda: bad_input.gauge(harness, "gangq_queue_unschedulable_jobs") == 1)
    assert bad_input.gauge(harness, "gangq_queue_pending_jobs") is None
    assert bad_input.gauge(harness, "gangq_queue_oldest_pending_seconds", tenant=None) is None
    counts = await bad_input.stored(harness.engine, "ml-train", name)
    assert counts.get("reservations") == 0 and "admitted" not in counts, counts


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        pytest.param(
            {"selectors": [f'{PRODUCT} == "NVIDIA H200"']},
            "unschedulable: no gpu.nvidia.com device matches the job's selectors: change "
            "spec.selectors",
            id="no-device-matches",
        ),
        pytest.param(
            {"selectors": [f"{PRODUCT} > 5"]},
            f"unschedulable: CEL selector '{PRODUCT} > 5' fails to evaluate: TypeError",
            id="cel-type-error",
        ),
        pytest.param(
            {"devicesPerReplica": 1000},
            "unschedulable: needs 1000 gpu.nvidia.com per replica, the most any node has is 8: "
            "lower devicesPerReplica",
            id="1000-devices-per-replica",
        ),
        pytest.param(
            {"topology": {"key": "example.com/zone", "mode": "Required"}},
            "unschedulable: no node carries topology key example.com/zone: fix topology.key or "
            "use mode Preferred",
            id="topology-key-nowhere",
        ),
        pytest.param(
            {"replicas": 3},
            "unschedulable: needs 3 nodes with 8 gpu.nvidia.com, the cluster has 2: ask for "
            "fewer replicas",
            id="more-nodes-than-the-cluster",
        ),
    ],
)
async def test_a_job_that_can_never_run_is_not_told_to_wait(
    harness: Harness, database_url: str, tmp_path: Path, spec: dict[str, Any], said: str
) -> None:
    harness.start()
    body = training_job("never", run_seconds=None)
    body["spec"].update(spec)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await _never_fits(harness, database_url, tmp_path, name="never", said=said)


async def test_more_than_the_tenant_may_ever_use_is_a_never_fit(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    small = QuotaConfig(device_class="gpu.nvidia.com", nominal=4, borrowing_limit=4)
    harness.start(tenants=(TenantConfig(name="ml-train", quotas=(small,)),))
    body = training_job("greedy", replicas=2, devices=8, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await _never_fits(
        harness,
        database_url,
        tmp_path,
        name="greedy",
        said="unschedulable: needs 16 gpu.nvidia.com, more than tenant ml-train may ever use "
        "(nominal 4 + borrowing limit 4 = 8): ask for fewer devices or a larger quota",
    )


async def test_a_gang_beside_a_prod_service_never_fits_until_the_service_shrinks(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    harness.start()
    prod = training_job(
        "llm-prod", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", prod)
    await wait_until(lambda: harness.phase("llm-prod", "inference") == "Running")
    gang = training_job("train-all", replicas=2, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", gang)
    await _never_fits(
        harness,
        database_url,
        tmp_path,
        name="train-all",
        said="unschedulable: needs 2 nodes with 8 gpu.nvidia.com, the cluster has 1 beside "
        "long-running jobs of tier prod-inference it may not evict (inference/llm-prod)",
    )
    # judged again when the cluster changes: the service goes, the gang runs
    await harness.kube.delete(resources.TRAINING_JOBS, "inference", "llm-prod")
    await wait_until(lambda: harness.phase("train-all") == "Running", within_s=30)


async def test_a_new_leader_does_not_judge_a_refused_job_again(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    """The conditions' observedGeneration says the refusal judged this spec: no second event,
    no retry after a restart."""
    harness.start()
    body = training_job("typo", replicas=1, selectors=["device.driver =="])
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await _refused(harness, database_url, tmp_path, name="typo", namespace="ml-train")
    admissible = bad_input.condition(harness, "typo", "ml-train", "Admissible")
    assert admissible["observedGeneration"] == 1
    await harness.stop()
    harness.start("b")
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", training_job("later"))
    await wait_until(lambda: harness.phase("later") == "Succeeded", within_s=30)
    counts = await bad_input.stored(harness.engine, "ml-train", "typo")
    assert counts == {"reservations": 0, "failed": 1}
    assert len(bad_input.kube_events(harness, "typo", "ml-train", "InvalidSpec")) == 1


async def test_a_job_refused_for_want_of_a_tenant_is_queued_once_its_namespace_has_one(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    harness.start()
    body = training_job("orphan", namespace="unlabelled", replicas=1, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "unlabelled", body)
    await _refused(harness, database_url, tmp_path, name="orphan", namespace="unlabelled")
    labels = {"metadata": {"labels": {"gangq.dev/tenant": "ml-train"}}}
    await harness.kube.patch(resources.NAMESPACES, "", "unlabelled", labels)
    await wait_until(lambda: harness.phase("orphan", "unlabelled") == "Running", within_s=30)
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "unlabelled", "orphan")
    assert (out["phase"], out["tenant"]) == ("Running", "ml-train")
