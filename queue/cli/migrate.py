"""`gangq migrate`: bring the database schema to the version this gangq needs.

Also owns the database options every command that opens the database shares
(`--database-url`, `--data-dir`), so they read the same everywhere. The store is imported only
when a command runs, so `gangq --help` does not load the database drivers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gangq.queue import eventloop


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (default: $DATABASE_URL, else the embedded server)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="data directory of the embedded PostgreSQL (default: under the user data dir)",
    )


def open_url(args: argparse.Namespace) -> str:
    """The database URL the options and environment select (starting the embedded server)."""
    from gangq.queue.store import database

    return database.resolve_url(args.database_url, data_dir=args.data_dir)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("migrate", help="apply the database migrations")
    add_database_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


async def _migrate(url: str) -> tuple[str | None, str | None]:
    from gangq.queue.store import database, schema

    engine = database.create_engine(url, pool_size=1)
    try:
        before = await schema.current_revision(engine)
        after = await schema.upgrade(engine)
    finally:
        await engine.dispose()
    return before, after


def run(args: argparse.Namespace) -> int:
    from gangq.queue.store import schema

    before, after = eventloop.run(_migrate(open_url(args)))
    if args.json:
        print(json.dumps({"before": before, "after": after, "head": schema.head_revision()}))
    elif before == after:
        print(f"database schema already at revision {after}")
    else:
        print(f"database schema migrated from {before or 'empty'} to revision {after}")
    return 0
