"""The trace format: YAML and JSON lines read the same, bad input names the line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import TopologyMode
from gangq.queue.sim import reference, trace

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "traces" / "sample.yaml"


def _document(**changes: Any) -> dict[str, Any]:
    job = {
        "name": "ml/train",
        "arrival": 5,
        "tenant": "ml",
        "tier": "training",
        "replicas": 2,
        "devicesPerReplica": 8,
        "runtime": 100,
        "maxRuntime": 90,
        "topology": {"key": "gangq.dev/rack", "mode": "Required"},
    }
    job.update(changes)
    return {
        "horizon": 1000,
        "cluster": {"nodes": 4, "racks": 2},
        "tenants": [{"name": "ml", "nominal": 16, "borrowingLimit": 8}],
        "jobs": [job],
    }


def test_a_yaml_document_becomes_a_trace() -> None:
    loaded = trace.from_document(_document())
    (job,) = loaded.jobs
    assert (loaded.cluster.capacity, loaded.horizon_s) == (32, 1000)
    assert (job.key, job.replicas, job.devices_per_replica, job.device_count) == (
        "ml/train",
        2,
        8,
        16,
    )
    assert job.topology.mode is TopologyMode.REQUIRED
    assert job.run_s == 90, "a job longer than its maxRuntime is stopped at the bound"
    assert loaded.quotas[0].nominal + loaded.quotas[0].borrowing_limit == 24


def test_json_lines_with_a_header_read_like_yaml(tmp_path: Path) -> None:
    document = _document()
    header = {key: value for key, value in document.items() if key != "jobs"}
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in [header, *document["jobs"]]) + "\n")
    assert trace.load(path) == trace.from_document(document)


def test_the_sample_trace_reads_the_same_in_both_formats() -> None:
    assert trace.load(SAMPLE) == trace.load(SAMPLE.with_suffix(".jsonl"))


def test_a_trace_without_tenants_has_no_quota_limits() -> None:
    document = _document()
    del document["tenants"]
    (quota,) = trace.from_document(document).quotas
    assert (quota.tenant, quota.nominal) == ("ml", 32)


def test_without_a_horizon_the_trace_ends_when_the_last_job_could() -> None:
    document = _document()
    del document["horizon"]
    assert trace.from_document(document).horizon_s == 5 + 90


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"replicas": 0}, "jobs[0]: replicas: Input should be greater than 0"),
        (
            {"tier": "gold"},
            "jobs[0]: tier: Input should be 'prod-inference', 'training' or 'small'",
        ),
        ({"runtime": -1}, "jobs[0]: runtime: Input should be greater than 0"),
        ({"gpus": 2}, "jobs[0]: gpus: Extra inputs are not permitted"),
        ({"tenant": "nobody"}, "job ml/train: tenant nobody is not in 'tenants'"),
        ({"replicas": 4}, "job ml/train: needs 32 devices, tenant ml may use at most 24"),
        (
            {"devicesPerReplica": 9, "replicas": 1},
            "job ml/train: 1x9 does not fit 4 nodes x 8 devices",
        ),
        ({"name": "no-namespace"}, "jobs[0]: name: String should match pattern"),
    ],
    ids=[
        "zero-replicas",
        "unknown-tier",
        "negative-runtime",
        "unknown-field",
        "unknown-tenant",
        "over-quota",
        "too-wide",
        "bad-name",
    ],
)
def test_bad_jobs_are_refused_with_the_field_to_fix(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        trace.from_document(_document(**changes), source="t.yaml")
    assert str(caught.value).startswith("t.yaml: ")
    assert message in str(caught.value)


def test_duplicate_names_are_refused() -> None:
    document = _document()
    document["jobs"] = document["jobs"] * 2
    with pytest.raises(InvalidInputError, match="job ml/train: the name appears twice"):
        trace.from_document(document)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"horizon": 10}\n{"arrival": 1, "tenant": "a"\n', "line 2: not JSON"),
        ('{"arrival": 1, "tenant": "a", "tier": "small"}\n[1]\n', "line 2: expected a mapping"),
        ('{"horizon": 10}\n', "the trace has no jobs"),
    ],
    ids=["broken-json", "not-an-object", "no-jobs"],
)
def test_bad_json_lines_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=message):
        trace.load(path)


def test_unreadable_and_malformed_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot read"):
        trace.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("jobs: [unclosed\n")
    with pytest.raises(InvalidInputError, match="not YAML"):
        trace.load(broken)
    listless = tmp_path / "listless.yaml"
    listless.write_text("jobs: 3\n")
    with pytest.raises(InvalidInputError, match="'jobs' must be a list"):
        trace.load(listless)


def test_a_generated_trace_survives_saving_and_loading() -> None:
    generated = reference.generate(seed=3, days=1)
    text = yaml.safe_dump(trace.to_document(generated), sort_keys=False)
    assert trace.from_document(yaml.safe_load(text)) == generated
