"""One fault soak for `gangq bench soak`: scratch database, emulator, two replicas, jobs, faults.

Owns the order of the run: set up (a fresh database on `DATABASE_URL`'s server, or a primary and
standby of its own with `--postgres-failover`; tenants, the
in-process emulator, two `gangq run` replicas as gangq's ServiceAccount with the RBAC of
deploy/), then until the deadline submit the seeded job mix, inject faults and check the
invariants; then stop the faults, let every job settle and count what is left (leaks, stuck
jobs) and every asyncio error either side reported. It must not fix anything it finds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import yaml
from sqlalchemy.engine import make_url

from gangq.queue.bench import soak_checks, soak_faults, soak_jobs, soak_replica
from gangq.queue.bench.postgres_pair import PostgresPair
from gangq.queue.core import model
from gangq.queue.core.errors import GangqError
from gangq.queue.demo import runner, serviceaccount, stack
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.emulator import Emulator
from gangq.queue.store import database, schema, tenants

CHECK_INTERVAL_S = 0.5
REST_INTERVAL_S = 2.0
START_TIMEOUT_S = 120.0
SETTLE_CHECK_S = 1.0
Echo = Callable[[str], None]


class LocalErrors(logging.Handler):
    """The soak process's own asyncio errors (the emulator runs here): the loop's exception
    handler and ERROR records carrying an exception."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name != "asyncio" and record.exc_info:
            error = record.exc_info[1]
            where = traceback.extract_tb(error.__traceback__)[-1:] if error else []
            place = f" at {where[0].filename}:{where[0].lineno}" if where else ""
            self.found.append(f"soak {record.name}: {record.getMessage()[:200]} {error!r}{place}")

    def on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.found.append(f"soak asyncio: {context.get('message')} {context.get('exception')!r}")
        loop.default_exception_handler(context)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        loop.set_exception_handler(self.on_loop_error)
        logging.getLogger().addHandler(self)
        try:
            yield
        finally:
            logging.getLogger().removeHandler(self)
            loop.set_exception_handler(previous)


async def soak(args: argparse.Namespace, *, echo: Echo) -> dict[str, Any]:
    """The figures of one run (see `gangq bench soak --help`)."""
    local = LocalErrors()
    started = time.monotonic()
    with local.installed():
        async with contextlib.AsyncExitStack() as exits:
            pair = None
            if args.postgres_failover:
                pair = exits.enter_context(PostgresPair(synchronous=True))
                url = database.normalize_url(pair.url)
            else:
                url = await exits.enter_async_context(stack.scratch_database())
            await _prepare_database(url)
            directory = Path(exits.enter_context(tempfile.TemporaryDirectory(prefix="soak-")))
            cluster = await exits.enter_async_context(
                Emulator(
                    inventory=Inventory(nodes=args.nodes, gpus_per_node=8, racks=2),
                    crds=(runner.default_crd(),),
                    ready_seconds=0.5,
                    history_size=args.watch_window,
                )
            )
            _create_namespaces(cluster)
            token, token_file = stack.admin_token_file(directory)
            kubeconfig = directory / "kubeconfig"
            # The replicas are gangq's ServiceAccount with the RBAC deploy/ ships.
            controller_token = serviceaccount.controller_token(cluster)
            kubeconfig.write_text(yaml.safe_dump(cluster.kubeconfig(controller_token)))
            logs = _log_directory(args.logs)
            replicas = [
                soak_replica.Replica(name, url, kubeconfig, token_file, logs, echo)
                for name in ("replica-a", "replica-b")
            ]
            exits.push_async_callback(_stop_all, replicas)
            for replica in replicas:
                await replica.start()
            dsn = database.libpq_url(url)
            await _until_leading(dsn, replicas)
            echo(f"replicas up (logs in {logs}); soaking {args.minutes:g} min, seed {args.seed}")
            mix = soak_jobs.JobMix(cluster.registry, seed=args.seed)
            injector = soak_faults.Injector(
                cluster, replicas, dsn, str(make_url(url).database), seed=args.seed + 1, pair=pair
            )
            checker = soak_checks.Checker(cluster.registry.storage, token)
            deadline = time.monotonic() + args.minutes * 60
            async with _checking(checker, replicas):
                await _load(mix, injector, deadline=deadline, echo=echo)
                await injector.settle()
                mix.stop_deleting()
                settle = await _settle(checker, mix, timeout_s=args.settle_seconds, echo=echo)
            await _stop_all(replicas)  # errors logged while stopping count too
            figures = _figures(
                args, mix, injector, checker, replicas=replicas, local=local, settle=settle
            )
            figures["leader_epoch"] = await _epoch(dsn)
            figures["recovery_actions"] = await _recovery_actions(dsn)
            figures["logs"] = str(logs)
    figures["elapsed_s"] = round(time.monotonic() - started, 1)
    figures["load_average"] = [round(value, 2) for value in os.getloadavg()]
    return figures


def _log_directory(chosen: Path | None) -> Path:
    """Where the replicas' stderr stays after the run (a new directory unless chosen)."""
    if chosen is None:
        return Path(tempfile.mkdtemp(prefix="gangq-soak-logs-"))
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen


async def _prepare_database(url: str) -> None:
    engine = database.create_engine(url)
    try:
        await schema.upgrade(engine)
        sessions = database.session_factory(engine)
        async with sessions() as session, session.begin():
            for name in soak_jobs.TENANTS:
                quota = model.TenantQuota(
                    tenant=model.Tenant(name), device_class=soak_jobs.DEVICE_CLASS, nominal=1024
                )
                await tenants.upsert_tenant(session, name, (quota,), actor="soak", now=time.time())
    finally:
        await engine.dispose()


def _create_namespaces(cluster: Emulator) -> None:
    for tenant in soak_jobs.TENANTS:
        labels = {soak_jobs.TENANT_LABEL: tenant}
        body = {"metadata": {"name": soak_jobs.namespace(tenant), "labels": labels}}
        cluster.registry.create(kinds.NAMESPACES, "", body)


async def _until_leading(dsn: str, replicas: list[soak_replica.Replica]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while await _holder(dsn) is None:
        if time.monotonic() > deadline or not all(r.is_running for r in replicas):
            tails = "\n".join(line for r in replicas for line in r.tail)
            raise GangqError(f"no replica took leadership within {START_TIMEOUT_S:.0f}s:\n{tails}")
        await asyncio.sleep(0.2)


async def _holder(dsn: str) -> str | None:
    connection = await asyncpg.connect(dsn)
    try:
        return await connection.fetchval(soak_faults.SELECT_LEADER)  # type: ignore[no-any-return]
    finally:
        await connection.close()


async def _epoch(dsn: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        return int(await connection.fetchval("SELECT epoch FROM leadership WHERE id = 1"))
    finally:
        await connection.close()


RECOVERY_ACTIONS = """
SELECT CASE WHEN kind = 'recovered' THEN details->>'action'
            WHEN kind = 'succeeded' OR kind = 'failed' THEN 'finished'
            ELSE 'released' END AS action, count(*)
FROM events
WHERE kind = 'recovered'
   OR (kind IN ('succeeded', 'failed') AND reason LIKE 'finished before the database recovery%')
   OR (kind = 'released' AND reason LIKE 'released after database recovery%')
GROUP BY 1 ORDER BY 1
"""


async def _recovery_actions(dsn: str) -> dict[str, int]:
    """What the leaders' recovery passes did, from the history they wrote (the database's
    final one: an entry a later stale promotion lost is not counted)."""
    connection = await asyncpg.connect(dsn)
    try:
        return {str(action): int(n) for action, n in await connection.fetch(RECOVERY_ACTIONS)}
    finally:
        await connection.close()


async def _stop_all(replicas: list[soak_replica.Replica]) -> None:
    await asyncio.gather(*(replica.stop() for replica in replicas))


@contextlib.asynccontextmanager
async def _checking(
    checker: soak_checks.Checker, replicas: list[soak_replica.Replica]
) -> AsyncIterator[None]:
    """Check the instant invariants every half second and REST every two, all run long."""

    async def loop() -> None:
        next_rest = 0.0
        while True:
            now = time.monotonic()
            checker.check_cluster(now=now)
            running = [replica for replica in replicas if replica.is_running]
            if now >= next_rest and running:
                await checker.check_rest(running[0].base_url, now=now)
                next_rest = now + REST_INTERVAL_S
            await asyncio.sleep(CHECK_INTERVAL_S)

    task = asyncio.create_task(loop(), name="soak-checks")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _load(
    mix: soak_jobs.JobMix, injector: soak_faults.Injector, *, deadline: float, echo: Echo
) -> None:
    """Submit, delete and inject until the deadline."""

    async def submitting() -> None:
        while time.monotonic() < deadline:
            now = time.monotonic()
            if mix.in_flight() < soak_jobs.IN_FLIGHT:
                mix.submit(now=now)
            for job in mix.due_deletions(now=now):
                mix.delete(job)
            await asyncio.sleep(mix.next_pause_s())

    async def injecting() -> None:
        last_report = time.monotonic()
        while time.monotonic() < deadline:
            await asyncio.sleep(injector.next_pause_s())
            await injector.inject()
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                echo(f"{len(mix.jobs)} jobs, faults {dict(injector.counts)}")

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(submitting(), name="soak-submit")
            group.create_task(injecting(), name="soak-faults")
    except BaseException:
        await injector.cancel()
        raise


async def _settle(
    checker: soak_checks.Checker, mix: soak_jobs.JobMix, *, timeout_s: float, echo: Echo
) -> float:
    """Wait until no job is unfinished and nothing leaks, or the timeout; the seconds it took."""
    started = time.monotonic()
    echo("faults stopped; letting every job settle")
    while time.monotonic() - started < timeout_s:
        for job in mix.due_deletions(now=float("inf")):
            mix.delete(job)
        if checker.unsettled(mix.jobs.values()) == 0:
            break
        await asyncio.sleep(SETTLE_CHECK_S)
    return round(time.monotonic() - started, 1)


def _figures(
    args: argparse.Namespace,
    mix: soak_jobs.JobMix,
    injector: soak_faults.Injector,
    checker: soak_checks.Checker,
    *,
    replicas: list[soak_replica.Replica],
    local: LocalErrors,
    settle: float,
) -> dict[str, Any]:
    jobs = list(mix.jobs.values())
    leaks, stuck = checker.leaks(), checker.stuck(jobs)
    errors = [f"{r.name}: {e}" for r in replicas for e in r.errors] + local.found
    return {
        "seed": args.seed,
        "minutes": args.minutes,
        "jobs": {
            "submitted": len(jobs),
            "refused_by_crd": mix.refused,
            "by_kind": dict(Counter(job.kind.name for job in jobs)),
            "outcomes": checker.outcomes(jobs),
        },
        "faults_injected": dict(sorted(injector.counts.items())),
        "violations": sum(checker.violations.counts.values()),
        "leaked_objects": sum(leaks.counts.values()),
        "stuck_jobs": sum(stuck.counts.values()),
        "asyncio_errors": len(errors),
        "details": {
            "violations": checker.violations.details,
            "leaked_objects": leaks.details,
            "stuck_jobs": stuck.details,
            "asyncio_errors": errors[: soak_checks.DETAILS],
        },
        "replicas": {
            "starts": {replica.name: replica.starts for replica in replicas},
            "unexpected_exits": sum(len(replica.exits) for replica in replicas),
            "exits": [exit.report() for replica in replicas for exit in replica.exits],
        },
        "checks": checker.checks,
        "rest_checks": checker.rest_checks,
        "settle_s": settle,
    }
