"""The full controller against the emulated cluster and a real PostgreSQL (`gangq bench e2e`).

Submits Kueue's published shape (see `workload`) through kubernetes-asyncio as fast as a bounded
number of concurrent requests allows, watches the pods, and prints jobs released per second,
creation-to-release latency percentiles and the release skew of each gang (see `releases`).
This module holds only the command line: the run itself is in `endtoend`, imported when the
suite runs, so that every other `gangq` command (and the planner bench's memory figure) does not
load the controller, the emulator and the API stack.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gangq.queue import eventloop
from gangq.queue.core.errors import InvalidInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=15_000, help="TrainingJobs to submit")
    parser.add_argument("--tenants", type=int, default=30, help="tenants, one namespace each")
    parser.add_argument("--nodes", type=int, default=500, help="emulated nodes, 8 GPUs each")
    parser.add_argument("--run-seconds", type=float, default=1.0, help="simulated pod runtime")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="submit this many jobs per second (0: as fast as --concurrency allows); a rate "
        "the cluster keeps up with measures latency without a backlog",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="TrainingJobs that already show their end, created before the controller starts, "
        "as a cluster keeps them after days of work",
    )
    parser.add_argument("--cycle-interval", type=float, default=0.1, help="controller cycle (s)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (s)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the job mix")
    parser.add_argument(
        "--podgroups",
        action="store_true",
        help="run twice, on a cluster without and with PodGroups (Kubernetes 1.36's gang "
        "scheduling), and report both: release skew, and how many consistent LISTs of pods "
        "saw a gang partly bound",
    )
    parser.add_argument(
        "--profile-controller",
        metavar="PATH",
        help="write the controller process's cProfile statistics here (read with pstats)",
    )


def run(args: argparse.Namespace) -> int:
    _check(args)
    from gangq.queue.bench import endtoend

    if args.podgroups:
        figures: dict[str, Any] = {}
        finished = True
        for name, podgroups in (("without_podgroups", False), ("with_podgroups", True)):
            figures[name], done = eventloop.run(
                endtoend.measure(args, echo=_stderr, podgroups=podgroups)
            )
            finished = finished and done
    else:
        figures, finished = eventloop.run(endtoend.measure(args, echo=_stderr))
    if args.json:
        print(json.dumps(figures))
    else:
        sections = figures.items() if args.podgroups else [("", figures)]
        for title, section in sections:
            if title:
                print(f"{title}:")
            for key, value in section.items():
                print(f"{key:>20}  {value}")
    if not finished:
        print(
            f"gangq bench e2e: not every job was released within {args.timeout:g}s", file=sys.stderr
        )
        return 1
    return 0


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _check(args: argparse.Namespace) -> None:
    if args.jobs < 1 or args.tenants < 1 or args.nodes < 1 or args.concurrency < 1:
        raise InvalidInputError("--jobs, --tenants, --nodes and --concurrency must be at least 1")
    if args.rate < 0 or args.history < 0:
        raise InvalidInputError("--rate and --history must be at least 0")
    if args.run_seconds < 0 or args.cycle_interval <= 0 or args.timeout <= 0:
        raise InvalidInputError(
            "--run-seconds must be at least 0, --cycle-interval and --timeout positive"
        )
