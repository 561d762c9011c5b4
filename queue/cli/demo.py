"""`gangq demo`: the reference scenario on an embedded database, cluster, controller and API.

Progress goes to stdout as it happens, then the summary; with `--json` stdout carries exactly
one JSON object and progress goes to stderr. The exit code is 0 only when every invariant and
every expectation of the story held.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from gangq.queue import eventloop, logconfig
from gangq.queue.core.errors import InvalidInputError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="play the reference scenario on an embedded cluster and check its invariants",
        description=(
            "Start an embedded PostgreSQL (or use DATABASE_URL's server), the cluster emulator "
            "with 8 nodes x 8 H100, the controller and the REST API; play examples/reference "
            "and print a timeline and a summary. Exit code 0 only when the invariants and the "
            "story held."
        ),
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object (progress goes to stderr)"
    )
    parser.add_argument(
        "--serve", action="store_true", help="keep the REST API up afterwards until Ctrl-C"
    )
    parser.add_argument(
        "--scenario",
        type=Path,
        default=None,
        help="folder holding scenario.yaml (default: examples/reference of this source tree)",
    )
    parser.add_argument(
        "--api-port", type=int, default=0, help="port of the REST API (default: a free one)"
    )
    parser.add_argument(
        "--podgroups",
        action="store_true",
        help="play on a cluster that serves PodGroups (Kubernetes 1.36 with gang scheduling "
        "on): gangq gives each gang one (docs/podgroups.md)",
    )
    logconfig.add_arguments(parser, level="warning")
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from gangq.queue.demo import report, runner, scenario

    if not 0 <= args.api_port <= 65535:
        raise InvalidInputError("--api-port must be between 0 and 65535")
    directory = args.scenario or scenario.default_directory()
    if not (directory / scenario.SCENARIO_FILE).is_file():
        raise InvalidInputError(
            f"no {scenario.SCENARIO_FILE} in {directory}: give the scenario folder with --scenario"
        )
    logconfig.configure(level=args.log_level, log_format=args.log_format)
    progress = sys.stderr if args.json else sys.stdout

    def echo(line: str) -> None:
        print(line, file=progress, flush=True)

    def tell(outcome: report.Outcome) -> None:
        if args.json:
            print(json.dumps(report.as_json(outcome)), flush=True)
        else:
            print(report.summary(outcome), flush=True)

    options = runner.Options(
        directory, echo, serve=args.serve, api_port=args.api_port, podgroups=args.podgroups
    )
    try:
        outcome = eventloop.run(runner.run(options, on_outcome=tell))
    except asyncio.CancelledError:
        print("gangq: demo stopped (SIGTERM)", file=sys.stderr)
        return 143
    return 0 if outcome.ok else 1
