"""`gangq sim` end to end through the command's own entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangq.queue import cli
from gangq.queue.sim import scenarios, trace

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "sample.yaml"
REQUIRED_KEYS = {
    "utilization",
    "utilization_busy",
    "utilization_bound",
    "partial_starts",
    "preemptions",
    "wait_p95_s",
    "max_gang_wait_s",
}


def _gangq(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    captured = capsys.readouterr()
    code = exited.value.code
    assert isinstance(code, int)
    return code, captured.out, captured.err


def test_json_prints_one_object_with_the_keys_of_every_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = _gangq(["sim", "--scenario", str(SAMPLE), "--policy", "all", "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert list(document["policies"]) == [
        "gangq",
        "fifo-strict",
        "fifo-besteffort",
        "device-plugin",
    ]
    for figures in document["policies"].values():
        assert set(figures) >= REQUIRED_KEYS
        assert set(figures["wait_p95_s"]) == {"prod-inference", "training", "small"}
    assert document["policies"]["device-plugin"]["partial_starts"] >= 1
    assert document["policies"]["fifo-strict"]["partial_starts"] == 0
    assert err == "", "no progress bar when stderr is not a terminal"


def test_the_reference_trace_runs_for_a_day_with_a_plot_and_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png, saved = tmp_path / "sim.png", tmp_path / "trace.yaml"
    argv = [
        "sim",
        "--days",
        "1",
        "--seed",
        "2",
        "--policy",
        "fifo-besteffort,device-plugin",
        "--plot",
        str(png),
        "--progress",
        "--write-trace",
        str(saved),
    ]
    code, out, err = _gangq(argv, capsys)
    assert code == 0
    assert out.startswith("scenario reference: ")
    assert out.splitlines()[1].split() == ["fifo-besteffort", "device-plugin"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "100% fifo-besteffort" in err and "100% device-plugin" in err
    replay = ["sim", "--scenario", str(saved), "--policy", "fifo-besteffort", "--json"]
    code, replayed, _ = _gangq(replay, capsys)
    first = ["sim", "--days", "1", "--seed", "2", "--policy", "fifo-besteffort", "--json"]
    code, generated, _ = _gangq(first, capsys)
    assert json.loads(replayed)["policies"]["fifo-besteffort"]["utilization"] == pytest.approx(
        json.loads(generated)["policies"]["fifo-besteffort"]["utilization"]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sim", "--policy", "kueue"], "unknown policy 'kueue'"),
        (["sim", "--scenario", "/nonexistent/trace.yaml"], "cannot read"),
        (["sim", "--days", "0"], "--days must be between 1 and 366"),
        (
            ["sim", "--plot", "/nonexistent/dir/out.png"],
            "--plot: folder /nonexistent/dir does not exist",
        ),
        (["sim", "--scenario", "philly2"], "unknown scenario 'philly2'; choose from reference"),
        (["sim", "--scenario", "pai", "--load", "heavy"], "--load: expected a number, got 'heavy'"),
        (["sim", "--scenario", "pai", "--load", "0"], "--load: expected a load above 0"),
        (["sim", "--scenario", "all", "--loads", "0.9,4"], "--loads: expected a load above 0"),
        (["sim", "--scenario", "all", "--load", "-1"], "--load: expected a load above 0"),
        (["sim", "--scenario", "acme", "--loads", "0.9"], "--loads needs --scenario all"),
        (["sim", "--scenario", str(SAMPLE), "--load", "0.9"], "--load needs a generated scenario"),
        (["sim", "--scenario", "all", "--policy", "all"], "--scenario all runs gangq, fifo-strict"),
        (["sim", "--scenario", "all", "--jobs", "0"], "--jobs must be at least 1"),
    ],
    ids=[
        "unknown-policy",
        "missing-trace",
        "no-days",
        "plot-folder-missing",
        "unknown-scenario",
        "load-not-a-number",
        "load-zero",
        "loads-too-high",
        "all-load-negative",
        "loads-without-all",
        "load-of-a-file",
        "all-with-policy",
        "no-jobs",
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _gangq(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("gangq: error: ") and message in err


ALL_TINY = ["sim", "--scenario", "all", "--days", "1", "--seeds", "1-1", "--loads", "0.3,0.35"]
"""Every scenario barely above prod serving's own load for a day: seconds, not hours."""


def test_all_prints_one_goal_row_per_scenario_seed_and_load_then_the_worst(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _gangq([*ALL_TINY, "--json", "--jobs", "2"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["policies"] == ["gangq", "fifo-strict", "fifo-besteffort"]
    assert document["seeds"] == [1] and document["loads"] == [0.3, 0.35]
    rows = document["rows"]
    assert [(row["scenario"], row["load"]) for row in rows] == [
        (scenario, offered)
        for scenario in ("reference", "mixed", "philly", "helios", "pai", "acme")
        for offered in (0.3, 0.35)
    ]
    for row in rows:
        assert set(row) >= {
            "utilization_useful",
            "fifo_utilization_useful",
            "lost_fraction",
            "prod_inference_wait_p95_s",
            "training_wait_p95_s",
            "fifo_besteffort_training_wait_p95_s",
            "small_wait_p95_s",
            "partial_starts",
            "offered_load",
        }
        assert row["useful_vs_fifo"] == pytest.approx(
            row["utilization_useful"] - row["fifo_utilization_useful"]
        )
        assert row["offered_load"] == pytest.approx(row["load"], abs=0.03)
    assert list(document["worst"]) == ["reference", "mixed", "philly", "helios", "pai", "acme"]
    for scenario, worst in document["worst"].items():
        mine = [row for row in rows if row["scenario"] == scenario]
        assert worst["utilization_useful"] == min(row["utilization_useful"] for row in mine)
        assert worst["lost_fraction"] == max(row["lost_fraction"] for row in mine)

    code, table, _ = _gangq(ALL_TINY, capsys)
    assert code == 0
    lines = table.splitlines()
    assert lines[0].startswith("scenarios reference, mixed, philly, helios, pai, acme; seeds 1-1")
    assert lines[1].split()[:4] == ["scenario", "seed", "load", "offered"]
    body = [line.split() for line in lines[2:]]
    assert len(body) == len(rows) + 6
    for cells, row in zip(body, rows, strict=False):
        assert cells[:3] == [row["scenario"], "1", f"{row['load']:g}"]
        assert cells[4] == f"{100 * row['utilization_useful']:.1f}%", "one process or two: same"
    assert [cells[:2] for cells in body[len(rows) :]] == [
        [scenario, "worst"] for scenario in document["worst"]
    ]


HOLDER_AND_ELASTIC = {
    "horizon": 5000,
    "cluster": {"nodes": 4, "racks": 1},
    "jobs": [
        {
            "name": "ops/holder",
            "arrival": 0,
            "tenant": "ops",
            "tier": "training",
            "replicas": 2,
            "devicesPerReplica": 8,
            "runtime": 1000,
        },
        {
            "name": "ml/elastic",
            "arrival": 1,
            "tenant": "ml",
            "tier": "training",
            "replicas": 4,
            "minReplicas": 2,
            "devicesPerReplica": 8,
            "runtime": 600,
        },
    ],
}
"""Two of four nodes held until 1000 by a gang whose end nobody can predict: gangq starts the
elastic job at once at 2 replicas; without its minimum it waits 999 s for all 4."""


def test_no_elastic_replays_a_trace_file_at_full_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, saved = tmp_path / "week.yaml", tmp_path / "saved.yaml"
    path.write_text(json.dumps(HOLDER_AND_ELASTIC))
    waits: dict[bool, dict[str, float]] = {}
    for flags in ([], ["--no-elastic"]):
        argv = ["sim", "--scenario", str(path), "--json", "--write-trace", str(saved), *flags]
        code, out, _ = _gangq(argv, capsys)
        assert code == 0
        waits[bool(flags)] = json.loads(out)["policies"]["gangq"]["wait_by_gang_size_s"]["4x8"]
        (_, written) = trace.load(saved).jobs
        assert written.min_replicas == (None if flags else 2), "the trace replayed is saved"
    assert (waits[False]["max"], waits[True]["max"]) == (0, 999)


def test_no_elastic_replays_every_scenario_of_all_at_full_sizes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    week = trace.from_document(HOLDER_AND_ELASTIC)
    monkeypatch.setattr(scenarios, "generate", lambda name, **_: week)
    argv = ["sim", "--scenario", "all", "--days", "1", "--seeds", "1-1", "--loads", "0.9"]
    rows: dict[bool, list[dict[str, float]]] = {}
    for flags in ([], ["--no-elastic"]):
        code, out, _ = _gangq([*argv, "--json", *flags], capsys)
        assert code == 0
        rows[bool(flags)] = json.loads(out)["rows"]
    assert {row["training_wait_p95_s"] for row in rows[False]} == {0}
    assert {row["training_wait_p95_s"] for row in rows[True]} == {999}
