"""`gangq usage`: device-hours per tenant, tier and device class (a chargeback report); a
partition or share counts as its GPU-equivalent (docs/partitions.md)."""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gangq.queue import eventloop
from gangq.queue.cli import migrate, table
from gangq.queue.core.errors import InvalidInputError

if TYPE_CHECKING:
    from gangq.queue.store.usage import UsageRow

_DURATION = re.compile(r"^(?P<amount>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """`30d`, `12h`, `90m`, `2w`, `45s` into seconds."""
    found = _DURATION.match(text.strip())
    if not found or float(found["amount"]) <= 0:
        raise InvalidInputError(
            f"--since {text!r}: expected a positive amount with a unit s, m, h, d or w (e.g. 30d)"
        )
    return float(found["amount"]) * _UNIT_S[found["unit"]]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="device-hours (GPU-equivalents) by tenant, tier and device class",
    )
    parser.add_argument("--tenant", help="only this tenant")
    parser.add_argument("--since", default="30d", help="window length back from now (default 30d)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    migrate.add_database_arguments(parser)
    parser.set_defaults(handler=run)


async def _report(
    url: str, *, since: float, until: float, tenant: str | None
) -> tuple[UsageRow, ...]:
    from gangq.queue.store import database, schema, usage

    engine = database.create_engine(url, pool_size=1)
    try:
        await schema.ensure_current(engine)
        async with database.session_factory(engine)() as session:
            return await usage.report(session, since=since, until=until, tenant=tenant)
    finally:
        await engine.dispose()


def _table(rows: tuple[UsageRow, ...]) -> str:
    lines = [(r.tenant, r.tier, r.device_class, str(r.jobs), f"{r.device_hours:.2f}") for r in rows]
    total = sum(r.device_hours for r in rows)
    lines.append(("total", "", "", str(sum(r.jobs for r in rows)), f"{total:.2f}"))
    return table.render(("tenant", "tier", "device class", "jobs", "device-hours"), lines)


def run(args: argparse.Namespace) -> int:
    window_s = parse_duration(args.since)
    until = time.time()
    rows = eventloop.run(
        _report(migrate.open_url(args), since=until - window_s, until=until, tenant=args.tenant)
    )
    if args.json:
        print(
            json.dumps(
                {
                    "since": until - window_s,
                    "until": until,
                    "tenant": args.tenant,
                    "rows": [asdict(row) for row in rows],
                    "total_device_hours": sum(row.device_hours for row in rows),
                }
            )
        )
    else:
        print(_table(rows))
    return 0
