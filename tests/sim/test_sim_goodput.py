"""The simulator's goodput figures: checkpoints bound lost work, predictions learned from
finished runs, `--config` replays a settings file, `--seeds` reports each seed and the worst."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gangq.queue import cli
from gangq.queue.sim import engine, mixed, policy, report, trace

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "sample.yaml"


def _job(name: str, arrival: float, tier: str, **fields: Any) -> dict[str, Any]:
    tenant = name.split("/", maxsplit=1)[0]
    return {"name": name, "arrival": arrival, "tenant": tenant, "tier": tier, **fields}


def _simulate(jobs: list[dict[str, Any]], *, nodes: int = 1, horizon: float = 500) -> Any:
    replayed = trace.from_document(
        {"horizon": horizon, "cluster": {"nodes": nodes, "racks": 1}, "jobs": jobs}
    )
    return engine.simulate(replayed, policy.create("gangq", device_class="gpu.nvidia.com"))


def test_an_evicted_gang_loses_only_the_work_since_its_last_checkpoint() -> None:
    """Evicted at 130 s (prod arrives at 100, 30 s grace) with a checkpoint every 50 s: 100 s
    are saved, 30 s x 8 devices are lost, and the next attempt resumes from 100 s."""
    jobs = [
        _job("ci/s", 0, "small", devicesPerReplica=8, runtime=1000, checkpointInterval=50),
        _job("prod/p", 100, "prod-inference", devicesPerReplica=8),
    ]
    outcome = _simulate(jobs)
    summary = report.summarize(outcome)
    assert summary["preemptions"] == 1
    assert summary["device_hours_lost"] == pytest.approx(8 * 30 / 3600)
    assert summary["lost_fraction"] == pytest.approx(8 * 30 / (8 * 500))
    assert outcome.records["ci/s"].progress_s == 100


def test_a_resumed_gang_runs_only_what_its_checkpoint_did_not_save() -> None:
    jobs = [
        _job("ci/s", 0, "small", devicesPerReplica=8, runtime=1000, checkpointInterval=50),
        _job("prod/p", 100, "prod-inference", devicesPerReplica=8, runtime=200),
    ]
    outcome = _simulate(jobs, horizon=2000)
    # prod runs 130-330; the small gang restarts at 330 (300 s, the default restartSeconds)
    # with 900 s left
    assert outcome.records["ci/s"].finished_at == 330 + 300 + 900


def test_lost_work_is_split_by_why_its_victims_went() -> None:
    """The resumed gang of the test above: 8 x 30 s lost to prod's eviction by tier, and its
    300 s restart after it counts with that eviction; the split adds up to the total."""
    jobs = [
        _job("ci/s", 0, "small", devicesPerReplica=8, runtime=1000, checkpointInterval=50),
        _job("prod/p", 100, "prod-inference", devicesPerReplica=8, runtime=200),
    ]
    summary = report.summarize(_simulate(jobs, horizon=2000))
    assert summary["device_hours_lost_by_cause"] == {
        "prod-inference > small": pytest.approx(8 * (30 + 300) / 3600)
    }
    assert summary["device_hours_lost"] == pytest.approx(8 * (30 + 300) / 3600)
    assert "device-hours lost: prod-inference > small" in report.table({"gangq": summary})


def _reclaimed(**borrower: Any) -> Any:
    """Tenant b's 8-device `b/long` (with `borrower`'s fields) borrows the whole node from
    tenant a (nominal 4 each), and a's 4-device job arriving at 20 s reclaims its nominal half
    once a quarter of its wait (`Policy.preemption_cost_factor`) has cost what evicting b
    costs."""
    replayed = trace.from_document(
        {
            "horizon": 8000,
            "cluster": {"nodes": 1, "racks": 1},
            "tenants": [
                {"name": "a", "nominal": 4, "borrowingLimit": 4},
                {"name": "b", "nominal": 4, "borrowingLimit": 4},
            ],
            "jobs": [
                _job("b/long", 0, "training", devicesPerReplica=8, runtime=6000, **borrower),
                _job("a/mine", 20, "training", devicesPerReplica=4, runtime=100),
            ],
        }
    )
    return engine.simulate(replayed, policy.create("gangq", device_class="gpu.nvidia.com"))


def test_lost_work_of_a_reclaim_is_named_by_the_reclaimer_tier() -> None:
    """b checkpoints every 600 s (ski rental: at b's checkpoint at 3,000 s, when a has been
    kept 4 x 2,980 device-s from its quota, a quarter of which covers b's 8 x 300-s
    restart)."""
    outcome = _reclaimed(checkpointInterval=600)
    summary = report.summarize(outcome)
    assert summary["preemptions"] == 1
    assert list(summary["device_hours_lost_by_cause"]) == ["reclaim by training"]
    assert sum(summary["device_hours_lost_by_cause"].values()) == pytest.approx(
        summary["device_hours_lost"]
    )


@pytest.mark.parametrize(
    ("fields", "gone_at", "progress_s"),
    [
        # asked at 400, it saves for 60 s and answers; its pods are gone 30 s later
        pytest.param(
            {"checkpointInterval": 600, "checkpointGraceSeconds": 120}, 490, 400, id="answers"
        ),
        # it never checkpoints: it runs out its 120 s grace and loses the whole run
        pytest.param({"checkpointGraceSeconds": 120}, 550, 0, id="silent"),
        # not asked: evicted at once, its last periodic checkpoint was at 0
        pytest.param({"checkpointInterval": 600}, 430, 0, id="not-asked"),
    ],
)
def test_a_victim_asked_first_loses_only_the_save_when_it_answers(
    fields: dict[str, Any], gone_at: float, progress_s: float
) -> None:
    jobs = [
        _job("ci/s", 0, "small", devicesPerReplica=8, runtime=5000, **fields),
        _job("prod/p", 400, "prod-inference", devicesPerReplica=8),
    ]
    outcome = _simulate(jobs, horizon=1000)
    asked = outcome.records["ci/s"]
    assert asked.evictions == 1
    assert outcome.records["prod/p"].first_started_at == gone_at
    assert asked.progress_s == progress_s
    assert asked.lost_device_s == 8 * (gone_at - progress_s)


@pytest.mark.parametrize(
    ("grace", "reclaimed_at", "saved_s"),
    [
        # at 3,600 b's checkpoint brings its cost to its restart (2,400 device-s), which a's
        # 4 x 3,580 device-s of wait cover four times: evicted then, gone 30 s later
        pytest.param(None, 3630, 3600, id="not-asked"),
        # asked first, b costs at most 8 x 120 s of work and its restart, 3,360 device-s,
        # covered at 3,380; it saves at the request, answers 60 s later and is gone at 3,470
        pytest.param(120, 3470, 3380, id="asked"),
    ],
)
def test_a_reclaim_pays_for_a_borrower_asked_first_with_its_grace_not_its_unsaved_run(
    grace: int | None, reclaimed_at: float, saved_s: float
) -> None:
    """b saves a checkpoint only hourly (`_reclaimed`)."""
    fields: dict[str, Any] = {"checkpointInterval": 3600}
    if grace is not None:
        fields["checkpointGraceSeconds"] = grace
    outcome = _reclaimed(**fields)
    assert outcome.records["a/mine"].first_started_at == reclaimed_at
    assert outcome.records["b/long"].evictions == 1
    assert outcome.records["b/long"].progress_s == saved_s


def test_predictions_come_from_the_finished_runs_of_the_same_family() -> None:
    jobs = [
        _job("ci/eval-1", 0, "small", runtime=100, maxRuntime=900, family="eval"),
        _job("ci/eval-2", 200, "small", runtime=120, maxRuntime=900, family="eval"),
        _job("ci/other-1", 400, "small", runtime=50, maxRuntime=900),
    ]
    outcome = _simulate(jobs, horizon=1000)
    records = outcome.records
    assert records["ci/eval-1"].predicted_run_s == 900, "no history: the bound"
    assert records["ci/eval-2"].predicted_run_s == 100
    assert records["ci/other-1"].predicted_run_s == 900, "another family has its own history"
    errors = sorted([800 / 100, 20 / 120, 850 / 50])
    assert report.summarize(outcome)["prediction_error"] == errors[1]


def test_fairness_is_one_when_every_tenant_gets_its_share() -> None:
    jobs = [
        _job("a/x", 0, "small", devicesPerReplica=4, runtime=400),
        _job("b/y", 0, "small", devicesPerReplica=4, runtime=400),
    ]
    assert report.summarize(_simulate(jobs))["fairness"]["jain"] == pytest.approx(1.0)


def _gangq(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    captured = capsys.readouterr()
    code = exited.value.code
    assert isinstance(code, int)
    return code, captured.out, captured.err


def _sample_figures(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code, out, _ = _gangq(["sim", "--scenario", str(SAMPLE), "--json", *extra], capsys)
    assert code == 0
    figures: dict[str, Any] = json.loads(out)["policies"]["gangq"]
    return figures


def test_config_replays_the_tiers_of_a_settings_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default tiers evict nobody in the sample; a file whose small tier always
    preempts (as serving does, without weighing the cost) makes the small jobs reclaim."""
    settings = tmp_path / "gangq.yaml"
    settings.write_text(
        "tiers:\n"
        "  - {name: prod-inference, rank: 300, longRunning: true}\n"
        "  - {name: training, rank: 200, minRuntimeBeforePreemptionSeconds: 600}\n"
        "  - {name: small, rank: 100, alwaysPreempts: true}\n"
    )
    assert _sample_figures(capsys)["preemptions"] == 0
    assert _sample_figures(capsys, "--config", str(settings))["preemptions"] == 1


def test_config_turns_on_holding_unsaved_borrowers_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off by default; with `unsaved_borrow_s`, ml-train's second training gang, which would
    borrow for hours without checkpoints, waits for the others' unused nominal quota."""
    settings = tmp_path / "gangq.yaml"
    settings.write_text("unsaved_borrow_s: 3600\n")
    assert "unsaved" not in _sample_figures(capsys)["wait_by_cause_h"]["training"]
    held = _sample_figures(capsys, "--config", str(settings))["wait_by_cause_h"]["training"]
    assert held["unsaved"] > 1


def test_config_replays_the_tenants_of_a_settings_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without borrowing, ml-train's second gang waits for its first to end."""
    settings = tmp_path / "gangq.yaml"
    settings.write_text(
        "tenants:\n"
        "  - name: prod\n"
        "    quotas: [{deviceClass: gpu.nvidia.com, nominal: 16}]\n"
        "  - name: ml-train\n"
        "    quotas: [{deviceClass: gpu.nvidia.com, nominal: 12, borrowingLimit: 0}]\n"
        "  - name: ci\n"
        "    quotas: [{deviceClass: gpu.nvidia.com, nominal: 4, borrowingLimit: 8}]\n"
    )
    before = _sample_figures(capsys)["wait_by_tenant_s"]["ml-train"]["training"]["max"]
    after = _sample_figures(capsys, "--config", str(settings))
    assert after["wait_by_tenant_s"]["ml-train"]["training"]["max"] > before + 3600
    settings.write_text(
        "tenants:\n  - name: prod\n    quotas: [{deviceClass: gpu.nvidia.com, nominal: 16}]\n"
    )
    code, _, err = _gangq(["sim", "--scenario", str(SAMPLE), "--config", str(settings)], capsys)
    assert code == 2
    assert "tenants ci, ml-train of the trace have no quota" in err


def test_seeds_report_each_seed_and_the_worst(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "--seeds", "1-2", "--days", "1", "--policy", "fifo-strict", "--json"]
    code, out, _ = _gangq(argv, capsys)
    assert code == 0
    document = json.loads(out)
    seeds = document["seeds"]
    assert list(seeds) == ["1", "2"]
    useful = [seeds[s]["policies"]["fifo-strict"]["utilization_useful"] for s in seeds]
    assert document["worst"]["fifo-strict"]["utilization_useful"] == min(useful)
    code, out, _ = _gangq(argv[:-1], capsys)
    assert code == 0
    assert out.splitlines()[-1].startswith("worst  fifo-strict")


def test_the_mixed_week_has_five_tenants_with_nominal_8_and_bounds_above_runs() -> None:
    week = mixed.generate(seed=1, days=2)
    assert {q.tenant: q.nominal for q in week.quotas} == dict.fromkeys(mixed.TENANTS, 8)
    assert all(
        job.max_runtime_s is not None
        and job.runtime_s is not None
        and job.max_runtime_s >= job.runtime_s
        for job in week.jobs
    )
    assert mixed.generate(seed=1, days=2) == week
