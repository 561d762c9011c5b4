"""The `gangq` command: one sub-command module per concern, each adding its own parser.

Command modules are imported lazily by name so that `gangq --help` stays fast and a command's
heavy dependencies (database drivers, the HTTP stack) load only when that command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol

from gangq.queue.core.errors import GangqError

# Each module exposes `register(subparsers)`, which sets `handler` on the parsers it adds.
COMMAND_MODULES: tuple[str, ...] = (
    "bench",
    "migrate",
    "usage",
    "cluster",
    "rest",
    "sim",
    "demo",
    "run",
    "logs",
)


class Handler(Protocol):
    def __call__(self, args: argparse.Namespace) -> int: ...


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gangq", description="Gang-admission queue controller for GPU clusters with DRA."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"gangq.queue.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        code = handler(args)
    except GangqError as error:
        print(f"gangq: error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
