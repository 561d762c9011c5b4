"""`gangq sim` end to end through the command's own entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangq.queue import cli

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
    ],
    ids=["unknown-policy", "missing-trace", "no-days", "plot-folder-missing"],
)
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _gangq(argv, capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("gangq: error: ") and message in err
