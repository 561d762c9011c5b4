"""`gangq bench planner` prints the figures it promises (speed itself is not asserted here)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gangq.queue.bench import planner, sweep
from gangq.queue.core.errors import InvalidInputError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    planner.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("preemption", [(), ("--preemption",)], ids=["plain", "preemption"])
def test_planner_prints_the_promised_json_keys(
    preemption: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parse("--nodes", "24", "--pending", "120", "--cycles", "2", "--json", *preemption)
    assert args.handler(args) == 0
    figures = json.loads(capsys.readouterr().out)
    assert {"cycle_ms", "end_cycle_ms", "idle_cycle_ms", "peak_mem_mb"} <= set(figures)
    assert figures["admitted"] + figures["pending"] == 120
    assert figures["cycle_ms"] > 0 and figures["peak_mem_mb"] > 0
    assert figures["idle_cycles_reused"] == 2
    if preemption:
        assert figures["preemptions"] > 0


def test_planner_rejects_nonsense_sizes() -> None:
    with pytest.raises(InvalidInputError, match="--nodes"):
        planner.measure(_parse("--nodes", "0"))


def test_sweep_runs_each_size_in_its_own_process_and_fits_the_growth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "sweep.png"
    args = _parse(
        *("--sweep", "--sweep-nodes", "12,24", "--sweep-pending", "40,80,160"),
        *("--nodes", "12", "--pending", "40", "--cycles", "1", "--json", "--plot", str(png)),
    )
    assert args.handler(args) == 0
    found = json.loads(capsys.readouterr().out)
    assert [row["nodes"] for row in found["points"]["nodes"]] == [12, 24]
    assert [row["pending_asked"] for row in found["points"]["pending"]] == [40, 80, 160]
    assert all(row["admitted"] + row["pending"] == 40 for row in found["points"]["nodes"])
    for axis in ("nodes", "pending"):
        assert isinstance(found["growth"][axis]["cycle_ms"], float)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_growth_is_the_slope_in_log_log() -> None:
    assert sweep.growth([(10, 3.0), (100, 300.0), (1000, 30_000.0)]) == pytest.approx(2.0)
    assert sweep.growth([(500, 80.0), (2000, 80.0)]) == pytest.approx(0.0)
    assert sweep.growth([(500, 80.0)]) is None


@pytest.mark.parametrize("text", ["", "0,10", "ten"])
def test_sweep_sizes_must_be_whole_and_positive(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        sweep.sizes(text)


def test_a_plot_needs_a_sweep(tmp_path: Path) -> None:
    args = _parse("--nodes", "4", "--pending", "4", "--plot", str(tmp_path / "x.png"))
    with pytest.raises(InvalidInputError, match="--sweep"):
        args.handler(args)
