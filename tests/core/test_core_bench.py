"""`gangq bench planner` prints the figures it promises (speed itself is not asserted here)."""

from __future__ import annotations

import argparse
import json

import pytest

from gangq.queue.bench import planner
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
    assert {"cycle_ms", "peak_mem_mb", "admitted", "pending"} <= set(figures)
    assert figures["admitted"] + figures["pending"] == 120
    assert figures["cycle_ms"] > 0 and figures["peak_mem_mb"] > 0
    if preemption:
        assert figures["preemptions"] > 0


def test_planner_rejects_nonsense_sizes() -> None:
    with pytest.raises(InvalidInputError, match="--nodes"):
        planner.measure(_parse("--nodes", "0"))
