"""gangq's goal figures beside the FIFO figures they are judged against, per trace and worst.

Owns picking the goal figures out of the three policies' summaries of one trace (docs/sim.md,
"Against the goals"), the worst of them over a scenario's seeds and loads, and their table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangq.queue.sim.reference import HOUR

POLICIES = ("gangq", "fifo-strict", "fifo-besteffort")
"""The policies a goal row needs: gangq and both FIFOs (the better one's useful utilization,
best-effort FIFO's training waits)."""


def _gap(value: Any, baseline: Any) -> Any:
    return None if value is None or baseline is None else value - baseline


def figures(policies: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The goal figures of one trace from each policy's `report.summarize`."""
    gangq, strict, besteffort = (policies[name] for name in POLICIES)
    waits = gangq["wait_p95_s"]
    fifo_useful = max(strict["utilization_useful"], besteffort["utilization_useful"])
    training = waits.get("training")
    fifo_training = besteffort["wait_p95_s"].get("training")
    return {
        "utilization_useful": gangq["utilization_useful"],
        "fifo_utilization_useful": fifo_useful,
        "useful_vs_fifo": gangq["utilization_useful"] - fifo_useful,
        "lost_fraction": gangq["lost_fraction"],
        "device_hours_lost": gangq["device_hours_lost"],
        "preemptions": gangq["preemptions"],
        "prod_inference_wait_p95_s": waits.get("prod-inference"),
        "training_wait_p95_s": training,
        "fifo_besteffort_training_wait_p95_s": fifo_training,
        "training_vs_fifo_besteffort_s": _gap(training, fifo_training),
        "small_wait_p95_s": waits.get("small"),
        "partial_starts": gangq["partial_starts"],
    }


def _highest(values: Iterable[Any]) -> Any:
    return max((v for v in values if v is not None), default=None)


def _lowest(values: Iterable[Any]) -> Any:
    return min((v for v in values if v is not None), default=None)


def worst(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Figure by figure the worst for gangq over the rows: lowest useful utilization and
    useful margin over the better FIFO, highest losses, waits, training excess over best-effort
    FIFO and partial starts."""
    highest = (
        "lost_fraction",
        "device_hours_lost",
        "preemptions",
        "prod_inference_wait_p95_s",
        "training_wait_p95_s",
        "training_vs_fifo_besteffort_s",
        "small_wait_p95_s",
        "partial_starts",
    )
    lowest = ("utilization_useful", "useful_vs_fifo")
    return {
        **{key: _lowest(row[key] for row in rows) for key in lowest},
        **{key: _highest(row[key] for row in rows) for key in highest},
    }


COLUMNS = (
    "scenario",
    "seed",
    "load",
    "offered",
    "useful",
    "fifo useful",
    "vs fifo",
    "lost",
    "prod p95",
    "training p95",
    "fifo-be training p95",
    "vs fifo-be",
    "small p95",
    "partial",
)


def _percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _points(value: Any) -> str:
    return "-" if value is None else f"{100 * value:+.1f}"


def _hours(seconds: Any, *, signed: bool = False) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / HOUR:+.2f}h" if signed else f"{seconds / HOUR:.2f}h"


def _cells(figures: Mapping[str, Any]) -> list[str]:
    return [
        _percent(figures["utilization_useful"]),
        _percent(figures.get("fifo_utilization_useful")),
        _points(figures["useful_vs_fifo"]),
        _percent(figures["lost_fraction"]),
        _hours(figures["prod_inference_wait_p95_s"]),
        _hours(figures["training_wait_p95_s"]),
        _hours(figures.get("fifo_besteffort_training_wait_p95_s")),
        _hours(figures["training_vs_fifo_besteffort_s"], signed=True),
        _hours(figures["small_wait_p95_s"]),
        str(figures["partial_starts"]),
    ]


def table(rows: Sequence[Mapping[str, Any]], *, worst: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per scenario, seed and load, then each scenario's worst line (`-` where a FIFO
    figure stands only beside the gap it makes)."""
    lines: list[list[str]] = [list(COLUMNS)]
    for row in rows:
        lines.append(
            [
                row["scenario"],
                str(row["seed"]),
                f"{row['load']:g}",
                f"{row['offered_load']:.3f}",
                *_cells(row),
            ]
        )
    for scenario, figures in worst.items():
        lines.append([scenario, "worst", "", "", *_cells(figures)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )
