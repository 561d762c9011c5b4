"""One end-to-end run for `gangq bench e2e`: scratch database, served cluster, controller, load.

Owns the order of the run and its deadline; it must not judge the figures against the targets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gangq.queue import config, controller
from gangq.queue import metrics as gangq_metrics
from gangq.queue.bench import releases, served_cluster, workload
from gangq.queue.core import model
from gangq.queue.core.errors import GangqError
from gangq.queue.demo import player, runner, stack, watcher
from gangq.queue.kube import cache
from gangq.queue.store import database, schema, tenants

PROGRESS_SECONDS = 2.0
STOP_SECONDS = 10.0
READY_SECONDS = 0.1
GPUS_PER_NODE = 8


async def measure(
    args: argparse.Namespace, *, echo: Callable[[str], None]
) -> tuple[dict[str, Any], bool]:
    """The figures, and whether every job was released before the deadline."""
    jobs = workload.jobs(args.jobs, tenants=args.tenants, seed=args.seed)
    observed = releases.Releases()
    for job in jobs:
        observed.expect(job.key, replicas=job.size.replicas)
    settings = config.load(cycle_interval_s=args.cycle_interval, tenants=())
    async with contextlib.AsyncExitStack() as exits:
        url = await exits.enter_async_context(stack.scratch_database())
        engine = database.create_engine(url)
        exits.push_async_callback(engine.dispose)
        await schema.upgrade(engine)
        await _set_tenants(engine, args.tenants, devices=args.nodes * GPUS_PER_NODE)
        configuration = await exits.enter_async_context(
            served_cluster.served_cluster(
                nodes=args.nodes,
                racks=max(2, args.nodes // 16),
                crd=runner.default_crd(),
                ready_seconds=READY_SECONDS,
            )
        )
        api_client = await exits.enter_async_context(client.ApiClient(configuration))
        await _create_namespaces(api_client, args.tenants)
        await _watch_pods(exits, api_client, observed)
        await _start_controller(exits, settings, api_client, engine)
        echo(f"cluster of {args.nodes} nodes ready; submitting {args.jobs} jobs")
        finished = await _submit_and_wait(api_client, jobs, observed, args=args, echo=echo)
        figures = observed.figures(now=time.monotonic())
    return figures, finished


async def _submit_and_wait(
    api_client: client.ApiClient,
    jobs: list[workload.Job],
    observed: releases.Releases,
    *,
    args: argparse.Namespace,
    echo: Callable[[str], None],
) -> bool:
    deadline = time.monotonic() + args.timeout
    submitting = asyncio.create_task(_submit(api_client, jobs, observed, args=args))
    try:
        while observed.done < len(jobs):
            if submitting.done() and submitting.exception() is not None:
                await submitting
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(min(PROGRESS_SECONDS, max(deadline - time.monotonic(), 0)))
            created = sum(1 for record in observed.records.values() if record.created)
            echo(f"submitted {created}/{len(jobs)}, released {observed.done}")
        return True
    finally:
        submitting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await submitting


async def _submit(
    api_client: client.ApiClient,
    jobs: list[workload.Job],
    observed: releases.Releases,
    *,
    args: argparse.Namespace,
) -> None:
    """Create every job with at most `--concurrency` requests in flight; with `--rate`, job i
    is not created before i / rate seconds from the start."""
    custom = client.CustomObjectsApi(api_client)
    pending = iter(enumerate(jobs))
    started = time.monotonic()

    async def worker() -> None:
        for index, job in pending:
            if args.rate > 0:
                await asyncio.sleep(max(0.0, started + index / args.rate - time.monotonic()))
            body = workload.document(job, run_seconds=args.run_seconds)
            at = time.monotonic()
            try:
                await custom.create_namespaced_custom_object(
                    player.GROUP, player.VERSION, job.namespace, player.PLURAL, body
                )
            except ApiException as error:
                raise GangqError(f"creating {job.key}: {error.status} {error.reason}") from error
            observed.created(job.key, at=at)

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))


async def _set_tenants(engine: Any, count: int, *, devices: int) -> None:
    """Every tenant may use the whole cluster: capacity, not quota, is the limit."""
    sessions = database.session_factory(engine)
    async with sessions() as session, session.begin():
        for index in range(count):
            name = workload.tenant_name(index)
            quota = model.TenantQuota(
                tenant=model.Tenant(name), device_class=workload.DEVICE_CLASS, nominal=devices
            )
            await tenants.upsert_tenant(session, name, (quota,), actor="bench", now=time.time())


async def _create_namespaces(api_client: client.ApiClient, count: int) -> None:
    core = client.CoreV1Api(api_client)
    for index in range(count):
        labels = {workload.TENANT_LABEL: workload.tenant_name(index)}
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=workload.namespace(index), labels=labels)
        )
        await core.create_namespace(body)


async def _watch_pods(
    exits: contextlib.AsyncExitStack, api_client: client.ApiClient, observed: releases.Releases
) -> None:
    def listener(kind: str, kind_of_event: str, obj: dict[str, Any]) -> None:
        observed.on_pod(obj, at=time.monotonic())

    core = client.CoreV1Api(api_client)
    observer = watcher.Watcher("pods", core.list_pod_for_all_namespaces, listener)
    task = asyncio.create_task(observer.run(), name="gangq-bench-watch-pods")
    exits.push_async_callback(_cancel, task)
    try:
        await asyncio.wait_for(observer.synced.wait(), timeout=STOP_SECONDS)
    except TimeoutError as error:
        raise GangqError(f"could not list pods within {STOP_SECONDS:.0f}s") from error


async def _start_controller(
    exits: contextlib.AsyncExitStack,
    settings: config.ControllerSettings,
    api_client: client.ApiClient,
    engine: Any,
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(
        controller.run_controller(
            settings=settings,
            api_client=api_client,
            engine=engine,
            stop=stop,
            cluster=cache.ClusterCache(api_client, settings=settings),
            metrics=gangq_metrics.create_metrics(),
        ),
        name="gangq-bench-controller",
    )

    async def halt() -> None:
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=STOP_SECONDS)
        if not done:
            await _cancel(task)

    exits.push_async_callback(halt)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
