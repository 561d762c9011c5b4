"""`gangq bench planner --sweep`: how cycle time and memory grow with the cluster and the queue.

Runs `gangq bench planner` once per point, each in a process of its own so that its peak
memory is its own: the cluster's size across `--sweep-nodes` with the queue at `--pending`, then
the queue's length across `--sweep-pending` with the cluster at `--nodes`. Prints one row per
point and, per axis, the growth a least-squares fit of log time on log size gives (an exponent
of 1 is linear); `--plot` draws both axes.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gangq.queue.core.errors import InvalidInputError

RUN = "from gangq.queue.cli import main; main()"
NODES = (500, 2000, 8000, 16000)
PENDING = (1000, 3000, 10000, 30000, 100000)
SHOWN = ("cycle_ms", "first_cycle_ms", "end_cycle_ms", "idle_cycle_ms", "peak_mem_mb")


def sizes(text: str) -> tuple[int, ...]:
    """`500,2000` into sizes, each at least 1."""
    try:
        found = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of whole numbers") from error
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give sizes of at least 1")
    return found


def _point(nodes: int, pending: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        "-c",
        RUN,
        "bench",
        "planner",
        "--json",
        f"--nodes={nodes}",
        f"--pending={pending}",
        f"--cycles={args.cycles}",
        f"--seed={args.seed}",
        *(["--preemption"] if args.preemption else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InvalidInputError(
            f"the planner bench at {nodes} nodes and {pending} pending failed: "
            f"{done.stderr.strip()[-500:]}"
        )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["pending_asked"] = pending
    return figures


def growth(points: Sequence[tuple[float, float]]) -> float | None:
    """The exponent b of y = a * x**b that fits the points best in log-log (None: fewer than
    two distinct sizes)."""
    logs = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in logs}) < 2:
        return None
    mean_x = sum(x for x, _ in logs) / len(logs)
    mean_y = sum(y for _, y in logs) / len(logs)
    spread = sum((x - mean_x) ** 2 for x, _ in logs)
    return sum((x - mean_x) * (y - mean_y) for x, y in logs) / spread


def measure(args: argparse.Namespace, *, progress: bool) -> dict[str, Any]:
    axes: dict[str, list[dict[str, Any]]] = {"nodes": [], "pending": []}
    for nodes in args.sweep_nodes:
        if progress:
            print(f"{nodes} nodes, {args.pending} pending", file=sys.stderr)
        axes["nodes"].append(_point(nodes, args.pending, args))
    for pending in args.sweep_pending:
        if progress:
            print(f"{args.nodes} nodes, {pending} pending", file=sys.stderr)
        axes["pending"].append(_point(args.nodes, pending, args))
    exponents = {
        axis: {
            figure: growth([(row[_size_key(axis)], row[figure]) for row in rows])
            for figure in ("cycle_ms", "peak_mem_mb")
        }
        for axis, rows in axes.items()
    }
    return {"preemption": args.preemption, "points": axes, "growth": exponents}


def _size_key(axis: str) -> str:
    return "nodes" if axis == "nodes" else "pending_asked"


def show(found: dict[str, Any]) -> None:
    header = f"{'nodes':>7} {'pending':>8} " + " ".join(f"{name:>15}" for name in SHOWN)
    for axis, rows in found["points"].items():
        print(f"# {axis} varied")
        print(header)
        for row in rows:
            print(
                f"{row['nodes']:>7} {row['pending_asked']:>8} "
                + " ".join(f"{row[name]:>15}" for name in SHOWN)
            )
        for figure, exponent in found["growth"][axis].items():
            shown = "n/a" if exponent is None else f"{exponent:.2f}"
            print(f"  {figure} grows as {axis}^{shown}")


def plot(found: dict[str, Any], path: Path) -> None:
    """Cycle time and peak memory against each axis, log-log, one panel per axis."""
    # matplotlib loads only when a plot is asked for (module `sim.plot` picks its backend)
    import matplotlib.pyplot as plt

    from gangq.queue.sim import plot as figures

    figure, panels = plt.subplots(1, 2, figsize=(11, 4.2))
    for panel, (axis, rows) in zip(panels, found["points"].items(), strict=True):
        sizes_seen = [row[_size_key(axis)] for row in rows]
        for name, style in (("cycle_ms", "o-"), ("first_cycle_ms", "s--"), ("end_cycle_ms", "^:")):
            panel.plot(sizes_seen, [row[name] for row in rows], style, label=name)
        panel.set_xscale("log")
        panel.set_yscale("log")
        panel.set_xlabel("nodes" if axis == "nodes" else "pending jobs")
        panel.set_ylabel("ms")
        memory = panel.twinx()
        memory.plot(sizes_seen, [row["peak_mem_mb"] for row in rows], "kx-.", label="peak MB")
        memory.set_ylabel("peak memory (MB)")
        fixed = rows[0]["pending_asked"] if axis == "nodes" else rows[0]["nodes"]
        other = "pending" if axis == "nodes" else "nodes"
        panel.set_title(f"{axis} varied ({fixed} {other})")
        lines, labels = panel.get_legend_handles_labels()
        more, more_labels = memory.get_legend_handles_labels()
        panel.legend(lines + more, labels + more_labels, fontsize=8, loc="upper left")
    figures.save(figure, path)
