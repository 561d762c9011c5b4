"""Properties of every policy on random small traces: the simulator's rule checks (no device
held twice, no quota exceeded) never fire, gang policies never start a gang partially, and no
policy does more useful work than the offline bound allows."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.queue.sim import engine, policy, report, trace

TIERS = ("prod-inference", "training", "small")


@st.composite
def _traces(draw: st.DrawFn) -> trace.Trace:
    count = draw(st.integers(min_value=1, max_value=12))
    jobs: list[dict[str, Any]] = []
    for index in range(count):
        tenant = draw(st.sampled_from(("a", "b")))
        jobs.append(
            {
                "name": f"{tenant}/job-{index}",
                "arrival": draw(st.integers(min_value=0, max_value=400)),
                "tenant": tenant,
                "tier": draw(st.sampled_from(TIERS)),
                "replicas": draw(st.integers(min_value=1, max_value=3)),
                "devicesPerReplica": draw(st.sampled_from((1, 2, 4, 8))),
                "runtime": draw(st.none() | st.integers(min_value=10, max_value=600)),
                "maxRuntime": draw(st.none() | st.integers(min_value=10, max_value=600)),
            }
        )
    tenants = [
        {"name": "a", "nominal": 16, "borrowingLimit": 8},
        {"name": "b", "nominal": 8, "borrowingLimit": 16},
    ]
    document = {
        "horizon": 1500,
        "cluster": {"nodes": 3, "racks": 1},
        "tenants": tenants,
        "jobs": jobs,
    }
    return trace.from_document(document)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replayed=_traces())
def test_every_policy_keeps_the_rules_on_random_traces(replayed: trace.Trace) -> None:
    for name in policy.POLICY_NAMES:
        outcome = engine.simulate(replayed, policy.create(name, device_class="gpu.nvidia.com"))
        summary = report.summarize(outcome)
        assert summary["utilization_useful"] <= summary["utilization_bound"] + 1e-9
        assert all(record.waited_s >= 0 for record in outcome.records.values())
        if name != "device-plugin":
            assert summary["partial_starts"] == 0
        for record in outcome.records.values():
            if record.finished_at is not None and record.job.run_s is not None:
                assert record.started_at is None
                assert record.finished_at <= replayed.horizon_s
