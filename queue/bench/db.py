"""Durable queue throughput: enqueues and admissions through PostgreSQL (`gangq bench db`).

Creates a scratch database on the selected server (`--database-url`, `DATABASE_URL`, else the
embedded one), migrates it, enqueues the synthetic queue, then runs full admission
transactions (leadership fence, reads, the real cycle, writes, commit) against the synthetic
inventory until a cycle admits nothing, keeping the jobs' views from one cycle to the next
as the controller does, then two more on the queue left as it was (`unchanged_cycle_ms`: what
a controller's step pays when nothing changed). Unless `--cold`, the selector cache is
warmed first by one pure cycle, as in a controller that has been running. Prints
`enqueue_per_s` and `admit_per_s`; the scratch database is dropped afterwards.

A batch is the jobs one transaction queues with a single `jobs.enqueue` call (one INSERT over
arrays plus one INSERT of their events). `enqueue_per_s` is for batches of `--batch` jobs, the
rate a caller reaches only when it queues many jobs per transaction; the first `--single` jobs
are queued one per transaction and reported apart as `enqueue_single_per_s`, the rate of a
caller that commits each job on its own.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from gangq.queue import eventloop
from gangq.queue.bench import synthetic
from gangq.queue.cli import migrate
from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import Policy, Snapshot
from gangq.queue.core.planner import Planner

NOW = 1_767_225_600.0
TIERS = ("prod-inference", "training", "small")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=2000, help="nodes, 8 devices each")
    parser.add_argument("--pending", type=int, default=10000, help="jobs to enqueue")
    parser.add_argument("--batch", type=int, default=500, help="jobs per enqueue transaction")
    parser.add_argument(
        "--single",
        type=int,
        default=200,
        help="jobs queued first, one per transaction (at most all but one of --pending)",
    )
    parser.add_argument("--cycles", type=int, default=5, help="most admission cycles to run")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the inputs")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="time the first cycle with an empty selector cache (default: warm it first, as a "
        "running controller has it)",
    )
    migrate.add_database_arguments(parser)


@dataclass(frozen=True, slots=True)
class Figures:
    enqueue_per_s: float
    """Jobs queued per second in transactions of `batch` jobs (one `jobs.enqueue` call each)."""
    enqueue_single_per_s: float
    """Jobs queued per second with one job per transaction (`single` of them)."""
    admit_per_s: float
    enqueued: int
    admitted: int
    pending: int
    cycles: int
    first_cycle_ms: float
    idle_cycle_ms: float
    """The last cycle: it admitted nothing (unless `--cycles` ran out first)."""
    unchanged_cycle_ms: float
    """The second of two more transactions a millisecond apart (the first reads back the
    reasons and positions the last cycle wrote): what a controller's step pays for its cycle
    when nothing changed (the fence, the reads of what was written since, and going over
    the kept rows; the decision is the planner's last answer)."""
    unchanged_reused: bool
    """Whether the planner answered both from the last cycle, as it should."""
    batch: int
    single: int
    nodes: int
    warmup_ms: float
    """Pure cycle run first (no database) so selector results are cached; 0 with --cold."""


async def _admin(url: str, statement: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    from gangq.queue.store import database

    connection = await asyncpg.connect(database.libpq_url(url))
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def _measure(url: str, args: argparse.Namespace) -> Figures:
    from gangq.queue.store import admission, database, jobs, leader, schema, snapshot, tenants

    engine = database.create_engine(url)
    sessions = database.session_factory(engine)
    leadership = leader.Leadership(url, holder="bench")
    try:
        await schema.upgrade(engine)
        queue = synthetic.pending(args.pending, rng=random.Random(args.seed), tiers=TIERS, now=NOW)
        async with sessions() as session, session.begin():
            for quota in synthetic.quotas(args.nodes):
                await tenants.upsert_tenant(session, quota.tenant, (quota,), actor="bench", now=NOW)
        single = min(args.single, len(queue) - 1)
        started = time.perf_counter()
        for job in queue[:single]:
            async with sessions() as session, session.begin():
                await jobs.enqueue(session, [job], actor="bench", now=NOW)
        single_s = time.perf_counter() - started
        started = time.perf_counter()
        for start in range(single, len(queue), args.batch):
            async with sessions() as session, session.begin():
                await jobs.enqueue(
                    session, queue[start : start + args.batch], actor="bench", now=NOW
                )
        enqueue_s = time.perf_counter() - started

        if not await leadership.try_acquire() or leadership.term is None:
            raise InvalidInputError("another process leads this scratch database")
        cluster = synthetic.inventory(args.nodes)
        policy = Policy(managed_device_classes=(synthetic.DEVICE_CLASS,))
        matcher = DeviceMatcher()
        started = time.perf_counter()
        if not args.cold:
            warm = Snapshot(
                inventory=cluster, quotas=synthetic.quotas(args.nodes), pending=tuple(queue)
            )
            cycle.run_cycle(snapshot=warm, policy=policy, now=NOW, matcher=matcher)
        warmup_ms = (time.perf_counter() - started) * 1000
        planner = Planner(matcher)
        views = snapshot.Views()
        admitted, admitting_s, cycle_ms = 0, 0.0, []
        for index in range(args.cycles):
            started = time.perf_counter()
            result = await admission.run(
                sessions,
                cluster,
                policy=policy,
                now=NOW + index,
                planner=planner,
                term=leadership.term,
                views=views,
            )
            elapsed = time.perf_counter() - started
            cycle_ms.append(elapsed * 1000)
            if not result.admissions:
                break
            admitted += len(result.admissions)
            admitting_s += elapsed
        reused = planner.reused
        for step in (1, 2):
            started = time.perf_counter()
            await admission.run(
                sessions,
                cluster,
                policy=policy,
                now=NOW + len(cycle_ms) - 1 + step / 1000,
                planner=planner,
                term=leadership.term,
                views=views,
            )
            unchanged_ms = (time.perf_counter() - started) * 1000
        reused = planner.reused == reused + 2
    finally:
        await leadership.release()
        await engine.dispose()
    return Figures(
        enqueue_per_s=(len(queue) - single) / enqueue_s,
        enqueue_single_per_s=single / single_s if single else 0.0,
        admit_per_s=admitted / admitting_s if admitted else 0.0,
        enqueued=len(queue),
        admitted=admitted,
        pending=len(queue) - admitted,
        cycles=len(cycle_ms),
        first_cycle_ms=cycle_ms[0],
        idle_cycle_ms=cycle_ms[-1],
        unchanged_cycle_ms=unchanged_ms,
        unchanged_reused=reused,
        batch=args.batch,
        single=single,
        nodes=args.nodes,
        warmup_ms=warmup_ms,
    )


async def _run_in_scratch_database(server: str, args: argparse.Namespace) -> Figures:
    from gangq.queue.store import database

    name = f"gangq_bench_{uuid.uuid4().hex[:12]}"
    await _admin(server, f'CREATE DATABASE "{name}"')
    try:
        return await _measure(database.with_database(server, name), args)
    finally:
        await _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(args: argparse.Namespace) -> int:
    if args.nodes < 1 or args.pending < 1 or args.batch < 1 or args.cycles < 1:
        raise InvalidInputError("--nodes, --pending, --batch and --cycles must be >= 1")
    if args.single < 0:
        raise InvalidInputError("--single must be >= 0")
    figures = eventloop.run(_run_in_scratch_database(migrate.open_url(args), args))
    if args.json:
        print(json.dumps(asdict(figures)))
    else:
        for name, value in asdict(figures).items():
            shown: Any = round(value, 1) if isinstance(value, float) else value
            print(f"{name:>20}  {shown}")
        print(
            f"(enqueue_per_s: {figures.batch} jobs per transaction, one jobs.enqueue call each; "
            "enqueue_single_per_s: one job per transaction)"
        )
    return 0
