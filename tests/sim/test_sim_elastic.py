"""Elastic trace jobs (PRODUCT rule 13): the simulator replays the core's start size, and a
job's work is device-seconds, so a smaller start runs longer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.sim import engine, policy, trace
from gangq.queue.sim.outcome import Outcome


def _job(name: str, arrival: float, **fields: Any) -> dict[str, Any]:
    tenant = name.split("/", maxsplit=1)[0]
    return {
        "name": name,
        "arrival": arrival,
        "tenant": tenant,
        "tier": "training",
        "devicesPerReplica": 8,
        **fields,
    }


def _run(name: str, jobs: list[dict[str, Any]]) -> Outcome:
    replayed = trace.from_document(
        {"horizon": 5000, "cluster": {"nodes": 4, "racks": 1}, "jobs": jobs}
    )
    return engine.simulate(replayed, policy.create(name, device_class="gpu.nvidia.com"))


def _span(outcome: Outcome, key: str) -> tuple[float | None, float | None]:
    record = outcome.records[key]
    return record.first_started_at, record.finished_at


ELASTIC = _job("ml/elastic", 1, replicas=4, minReplicas=2, runtime=600)


@pytest.mark.parametrize(
    ("name", "span"),
    [
        pytest.param("gangq", (1, 1 + 600 * 4 / 2), id="gangq-starts-at-the-minimum"),
        pytest.param("fifo-besteffort", (1300, 1900), id="fifo-waits-for-all-replicas"),
    ],
)
def test_an_elastic_job_where_only_its_minimum_fits(name: str, span: tuple[float, float]) -> None:
    """Two of four nodes are held until 1300 by a gang whose end nobody can predict: gangq
    starts the elastic job at 2 of 4 replicas, where its 600 s of work at 4 take 1200 s (it
    ends before the holder, nothing to grow onto)."""
    outcome = _run(name, [_job("ops/holder", 0, replicas=2, runtime=1300), ELASTIC])
    assert _span(outcome, "ml/elastic") == span
    assert not outcome.records["ml/elastic"].was_partial


def test_an_elastic_job_waits_for_its_maximum_when_that_is_predicted_to_end_sooner() -> None:
    """The holder is bounded to end at 100: all 4 replicas from then end at 700, sooner than
    2 started now (1201)."""
    holder = _job("ops/holder", 0, replicas=2, runtime=100, maxRuntime=100)
    elastic = {**ELASTIC, "maxRuntime": 600}
    outcome = _run("gangq", [holder, elastic])
    assert _span(outcome, "ml/elastic") == (100, 700)
    assert outcome.records["ml/elastic"].waited_by_cause == {"capacity": 99}


def test_an_elastic_job_whose_maximum_fits_runs_its_runtime() -> None:
    outcome = _run("gangq", [ELASTIC])
    assert _span(outcome, "ml/elastic") == (1, 601)


def test_an_evicted_elastic_job_resumes_its_saved_work_at_the_size_it_starts_at_again() -> None:
    """At 2 of 4 replicas from 1, checkpointing every 100 s, the job is evicted for a prod
    gang at 451 and gone at 481: the 400 s its checkpoints saved are 200 s of its work at 4
    replicas, and it loses 16 devices x 80 s. When the prod gang and the holder both end at
    751, it starts again at all 4, and the 400 s of work left take 400 s."""
    holder = _job("ops/holder", 0, replicas=2, runtime=751)
    elastic = {**ELASTIC, "checkpointInterval": 100, "restartSeconds": 0}
    prod = _job("prod/serve", 451, tier="prod-inference", replicas=2, runtime=270)
    outcome = _run("gangq", [holder, elastic, prod])
    record = outcome.records["ml/elastic"]
    assert (record.evictions, record.progress_s, record.lost_device_s) == (1, 200, 16 * 80)
    assert record.finished_at == 751 + 400


@pytest.mark.parametrize("suffix", [".yaml", ".jsonl"])
def test_both_trace_formats_read_and_write_the_minimum(tmp_path: Any, suffix: str) -> None:
    path = tmp_path / f"trace{suffix}"
    if suffix == ".jsonl":
        path.write_text(json.dumps(ELASTIC) + "\n")
    else:
        path.write_text(json.dumps({"jobs": [ELASTIC]}))
    (job,) = trace.load(path).jobs
    assert (job.replicas, job.min_replicas, job.least_replicas) == (4, 2, 2)
    (written,) = trace.to_document(trace.load(path))["jobs"]
    assert written["minReplicas"] == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(
            {"replicas": 2, "minReplicas": 3},
            "job ml/elastic: minReplicas 3 is more than replicas 2",
            id="above-replicas",
        ),
        pytest.param({"minReplicas": 0}, "minReplicas: Input should be greater than 0", id="zero"),
        pytest.param(
            {"replicas": 6, "minReplicas": 5, "devicesPerReplica": 4},
            "job ml/elastic: 5x4 does not fit 4 nodes x 8 devices",
            id="minimum-larger-than-the-cluster",
        ),
        pytest.param(
            {"replicas": 6, "minReplicas": 5},
            "job ml/elastic: needs 40 devices, tenant ml may use at most 32",
            id="minimum-larger-than-the-quota",
        ),
    ],
)
def test_a_minimum_that_cannot_be_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        trace.from_document({"cluster": {"nodes": 4}, "jobs": [{**ELASTIC, **fields}]})


def test_a_maximum_larger_than_the_cluster_is_fine_when_the_minimum_fits() -> None:
    outcome = _run("gangq", [{**ELASTIC, "replicas": 6}])
    assert _span(outcome, "ml/elastic") == (1, 1 + 600 * 6 / 4)


def test_without_its_minimum_a_job_that_started_smaller_starts_at_full_size_later() -> None:
    """The week of the first test without elasticity: instead of its 600 s of work at 2 of 4
    replicas from 1 (1200 s), the job waits for the holder's end and runs 600 s at all 4."""
    jobs = [_job("ops/holder", 0, replicas=2, runtime=1300), ELASTIC]
    replayed = trace.from_document(
        {"horizon": 5000, "cluster": {"nodes": 4, "racks": 1}, "jobs": jobs}
    )
    elastic, rigid = (
        engine.simulate(week, policy.create("gangq", device_class="gpu.nvidia.com")).records[
            "ml/elastic"
        ]
        for week in (replayed, replayed.without_elastic())
    )
    assert (elastic.first_started_at, elastic.finished_at) == (1, 1 + 600 * 4 / 2)
    assert (rigid.first_started_at, rigid.finished_at) == (1300, 1900)


def test_a_smaller_start_is_stopped_at_its_bound_like_any_run() -> None:
    """The first run of the family ends in 200 s; the second is predicted alike and starts at
    2 of 4 replicas beside a holder without end (400 s by prediction, within its 1,100 s
    bound), but its 1,000 s of work at 4 would take 2,000 s at 2: `maxRuntime` bounds wall
    time, so it is stopped at 300 + 1,100."""
    first = _job("ml/el-1", 1, replicas=4, minReplicas=2, runtime=200, maxRuntime=1100)
    holder = _job("ops/holder", 250, replicas=2, runtime=5000)
    second = _job("ml/el-2", 300, replicas=4, minReplicas=2, runtime=1000, maxRuntime=1100)
    outcome = _run("gangq", [first, holder, second])
    assert _span(outcome, "ml/el-1") == (1, 201)
    assert outcome.records["ml/el-2"].predicted_end == 300 + 200 * 4 / 2
    assert _span(outcome, "ml/el-2") == (300, 1400)
