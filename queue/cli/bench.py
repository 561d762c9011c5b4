"""`gangq bench SUITE`: performance figures; each suite lives in `gangq.queue.bench.<suite>`."""

from __future__ import annotations

import importlib
from typing import Any

# Each suite module exposes `add_arguments(parser)` and `run(args) -> int`.
SUITES: tuple[str, ...] = ("planner", "db", "e2e", "api", "soak", "ui")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="print performance figures (add --json for JSON)")
    suites = parser.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for name in SUITES:
        module = importlib.import_module(f"gangq.queue.bench.{name}")
        suite = suites.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        suite.add_argument("--json", action="store_true", help="print one JSON object")
        module.add_arguments(suite)
        suite.set_defaults(handler=module.run)
