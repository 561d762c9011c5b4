"""Scheduling-cycle speed and memory on a synthetic cluster and queue (`gangq bench planner`).

Builds one snapshot (see `synthetic`), runs the cycle several times with one shared
DeviceMatcher, as the controller does, and prints the median cycle time (wall clock, and the
CPU time of this process, which other load on the machine inflates less), the time of a cycle
after one more running gang ended (`end_cycle_ms`), the time of a cycle whose input did not
change (`idle_cycle_ms`: the controller's `Planner` given an equal snapshot, rebuilt as the
store rebuilds it at every step), the peak resident memory, and how many jobs the cycle
admitted and left pending.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gangq.queue.bench import sweep, synthetic
from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import Policy, Snapshot
from gangq.queue.core.planner import Planner

NOW = 1_767_225_600.0
"""A fixed clock, so every run of the suite sees the same inputs."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=2000, help="nodes, 8 devices each")
    parser.add_argument("--pending", type=int, default=10000, help="pending jobs")
    parser.add_argument("--cycles", type=int, default=5, help="cycles to time (median)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the inputs")
    parser.add_argument(
        "--preemption",
        action="store_true",
        help="a full cluster where a third of the queue needs victims",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="run once per size of --sweep-nodes (queue at --pending) and of --sweep-pending "
        "(cluster at --nodes), each in its own process, and print how the figures grow",
    )
    parser.add_argument(
        "--sweep-nodes",
        type=sweep.sizes,
        default=sweep.NODES,
        metavar="N1,N2",
        help="cluster sizes of --sweep (default 500,2000,8000,16000)",
    )
    parser.add_argument(
        "--sweep-pending",
        type=sweep.sizes,
        default=sweep.PENDING,
        metavar="P1,P2",
        help="queue lengths of --sweep (default 1000,3000,10000,30000,100000)",
    )
    parser.add_argument("--plot", type=Path, metavar="PNG", help="with --sweep: draw it")
    parser.set_defaults(handler=run)


def _peak_mem_mb() -> float:
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak_kb / 1024, 1)


def measure(args: argparse.Namespace, *, progress: bool = False) -> dict[str, Any]:
    if args.nodes < 1 or args.pending < 0 or args.cycles < 1:
        raise InvalidInputError("--nodes and --cycles must be at least 1, --pending at least 0")
    snapshot = synthetic.snapshot(
        nodes=args.nodes,
        pending_count=args.pending,
        preemption=args.preemption,
        seed=args.seed,
        now=NOW,
    )
    policy = Policy(managed_device_classes=(synthetic.DEVICE_CLASS,), preemption=args.preemption)
    matcher = DeviceMatcher()
    # Long-lived inputs leave the cyclic collector's view, as a controller does with its
    # caches; otherwise full collections rescan the whole snapshot during timed cycles.
    gc.collect()
    gc.freeze()
    timings, cpu_timings = [], []
    for index in range(args.cycles):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = cycle.run_cycle(snapshot=snapshot, policy=policy, now=NOW, matcher=matcher)
        timings.append((time.perf_counter() - started) * 1000)
        cpu_timings.append((time.process_time() - cpu_started) * 1000)
        if progress:
            print(f"cycle {index + 1}/{args.cycles}: {timings[-1]:.1f} ms", file=sys.stderr)
    ends = []
    for index in range(1, args.cycles + 1):
        after = dataclasses.replace(snapshot, running=snapshot.running[index:])
        started = time.perf_counter()
        cycle.run_cycle(snapshot=after, policy=policy, now=NOW, matcher=matcher)
        ends.append((time.perf_counter() - started) * 1000)
    idle, reused = _idle_cycles(snapshot, policy=policy, matcher=matcher, cycles=args.cycles)
    return {
        "nodes": args.nodes,
        "devices": len(snapshot.inventory.devices),
        "running": len(snapshot.running),
        "preemption": args.preemption,
        "cycles": args.cycles,
        "cycle_ms": round(statistics.median(timings), 1),
        "cycle_cpu_ms": round(statistics.median(cpu_timings), 1),
        "first_cycle_ms": round(timings[0], 1),
        "end_cycle_ms": round(statistics.median(ends), 1),
        "idle_cycle_ms": round(statistics.median(idle), 2),
        "idle_cycles_reused": reused,
        "peak_mem_mb": _peak_mem_mb(),
        "admitted": len(result.admissions),
        "pending": len(result.pending),
        "preemptions": len(result.preemptions),
        "victims": sum(len(p.victims) for p in result.preemptions),
        "reservations": len(result.reservations),
    }


def _idle_cycles(
    snapshot: Snapshot, *, policy: Policy, matcher: DeviceMatcher, cycles: int
) -> tuple[list[float], int]:
    """Milliseconds of each of `cycles` steps that find the input of the last cycle again, a
    millisecond apart, and how many of them the planner answered from the last cycle (a
    decision due within those milliseconds makes it decide again). Each gets a snapshot
    equal to the first but made anew, as `snapshot.load` makes it at every step: new tuples
    and mappings around the same job views."""
    planner = Planner(matcher)
    planner.run(snapshot=snapshot, policy=policy, now=NOW)
    timings = []
    for index in range(1, cycles + 1):
        again = dataclasses.replace(
            snapshot,
            running=tuple(list(snapshot.running)),
            pending=tuple(list(snapshot.pending)),
            free_since=dict(snapshot.free_since),
        )
        started = time.perf_counter()
        planner.run(snapshot=again, policy=policy, now=NOW + index / 1000)
        timings.append((time.perf_counter() - started) * 1000)
    return timings, planner.reused


def run(args: argparse.Namespace) -> int:
    if args.plot is not None and not args.sweep:
        raise InvalidInputError("--plot draws a --sweep")
    if args.sweep:
        found = sweep.measure(args, progress=not args.json)
        if args.plot is not None:
            sweep.plot(found, args.plot)
        if args.json:
            print(json.dumps(found))
        else:
            sweep.show(found)
        return 0
    figures = measure(args, progress=not args.json)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>16}  {value}")
    return 0
