"""One end-to-end run for `gangq bench e2e`: scratch database, served cluster, controller, load.

Owns the order of the run and its deadline: the emulator and the controller each run in their
own process (so the controller's CPU figure is its own), the controller as gangq's
ServiceAccount with the RBAC deploy/ ships while the bench's load and watches play admin users,
the API server's write counters are read before the first job and after the last one ended,
and a short saturation load measures the emulator's write throughput at the end. It must not
judge the figures against the targets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import text

from gangq.queue.bench import (
    controller_process,
    releases,
    request_cost,
    saturation,
    served_cluster,
    workload,
)
from gangq.queue.bench import writes as api_writes
from gangq.queue.core import inventory, model
from gangq.queue.core.errors import GangqError
from gangq.queue.demo import player, runner, stack, watcher
from gangq.queue.kube import objects, resources, trainingjob
from gangq.queue.kube.client import Kube
from gangq.queue.kubesim import kubelet
from gangq.queue.store import database, schema, tenants
from gangq.queue.store import jobs as store_jobs

PROGRESS_SECONDS = 2.0
STOP_SECONDS = 10.0
READY_SECONDS = 0.1
GPUS_PER_NODE = 8
SATURATION_SECONDS = 3.0
COST_REQUESTS = 2000
"""Requests timed for `client_request_cpu_us`, the unit of `controller_cpu_requests_per_job`."""
READY_TIMEOUT_SECONDS = 120.0
"""For every cache to sync and a first cycle to run: lists of thousands of slices take a while."""
SETTLE_SECONDS = 0.5
"""After the last job shows its end: the controller's last writes of that step land."""
ENDED = ("Succeeded", "Failed")
HISTORY_PREFIX = "done"
ENDED_HISTORY = text(
    "UPDATE jobs SET phase = 'Succeeded', finished_at = now(), queue_position = NULL "
    "WHERE uid = ANY(:uids)"
)


async def measure(
    args: argparse.Namespace, *, echo: Callable[[str], None], podgroups: bool = False
) -> tuple[dict[str, Any], bool]:
    """The figures, and whether every job was released and ended before the deadline;
    `podgroups`: on a cluster that serves PodGroups (the controller's `auto` uses them)."""
    jobs = workload.jobs(args.jobs, tenants=args.tenants, seed=args.seed)
    observed = releases.Releases()
    for job in jobs:
        observed.expect(job.key, replicas=job.size.replicas)
    ended: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as exits:
        url = await exits.enter_async_context(stack.scratch_database())
        engine = database.create_engine(url)
        exits.push_async_callback(engine.dispose)
        await schema.upgrade(engine)
        await _set_tenants(engine, args.tenants, devices=args.nodes * GPUS_PER_NODE)
        served = await exits.enter_async_context(
            served_cluster.served_cluster(
                nodes=args.nodes,
                racks=max(2, args.nodes // 16),
                crd=runner.default_crd(),
                ready_seconds=READY_SECONDS,
                podgroups=podgroups,
            )
        )
        api_client = await exits.enter_async_context(client.ApiClient(served.configuration))
        await _create_namespaces(api_client, args.tenants)
        await _keep_history(api_client, engine, args.history, tenants=args.tenants, seed=args.seed)
        await _watch(exits, api_client, observed, ended)
        startup_cpu_s, cpu = await _start_controller(exits, args, served=served, url=url)
        before = await api_writes.read(served.configuration)
        echo(f"cluster of {args.nodes} nodes ready; submitting {args.jobs} jobs")
        lists = _Lists()
        lister = Kube(api_client)
        exits.push_async_callback(lister.close)
        listing = asyncio.create_task(lists.run(lister), name="gangq-bench-lists")
        try:
            finished = await _submit_and_wait(
                api_client, jobs, observed, ended, args=args, echo=echo
            )
        finally:
            await _cancel(listing)
        figures = observed.figures(now=time.monotonic())
        figures["pod_lists"] = lists.taken
        figures["pod_lists_with_a_gang_partly_bound"] = lists.partly_bound
        await asyncio.sleep(SETTLE_SECONDS)
        after = await api_writes.read(served.configuration)
        submitted = Counter({f"POST {player.PLURAL}": len(jobs)})
        figures |= api_writes.per_job(before, after, jobs=len(jobs), submitted=submitted)
        cpu_s = await cpu() - startup_cpu_s
        figures["controller_cpu_ms_per_job"] = round(cpu_s * 1000 / max(observed.done, 1), 2)
        figures["controller_startup_cpu_s"] = round(startup_cpu_s, 2)
        figures["history_jobs"] = args.history
        echo(f"saturating the emulator for {SATURATION_SECONDS:g}s")
        cpu_before = saturation.cpu_seconds(served.pid)
        load = await saturation.saturate(
            served.configuration, namespace=workload.namespace(0), seconds=SATURATION_SECONDS
        )
        cpu_after = saturation.cpu_seconds(served.pid)
        figures["emulator_writes_per_s"] = round(load.per_second)
        if cpu_before is not None and cpu_after is not None and cpu_after > cpu_before:
            figures["emulator_writes_per_cpu_s"] = round(load.writes / (cpu_after - cpu_before))
        echo(f"timing {COST_REQUESTS} requests of the controller's client")
        cost_us = await request_cost.cpu_us_per_request(
            served.configuration, namespace=workload.namespace(0), requests=COST_REQUESTS
        )
        figures["client_request_cpu_us"] = round(cost_us)
        figures["controller_cpu_requests_per_job"] = round(
            figures["controller_cpu_ms_per_job"] * 1000 / cost_us, 1
        )
    return figures, finished


@dataclass(eq=False)
class _Lists:
    """A client that LISTs every pod without pause, as a dashboard or an audit would, and
    counts the consistent LISTs in which some gang attempt is partly bound to nodes."""

    taken: int = 0
    partly_bound: int = 0

    async def run(self, kube: Kube) -> None:
        while True:
            answer = await kube.list(resources.PODS, query=releases.LIVE_PODS)
            self.taken += 1
            if releases.partly_bound(answer.get("items") or []):
                self.partly_bound += 1


async def _submit_and_wait(
    api_client: client.ApiClient,
    jobs: list[workload.Job],
    observed: releases.Releases,
    ended: dict[str, str],
    *,
    args: argparse.Namespace,
    echo: Callable[[str], None],
) -> bool:
    """Submit, then wait until every job was released and shows its end (Succeeded/Failed)."""
    deadline = time.monotonic() + args.timeout
    submitting = asyncio.create_task(_submit(api_client, jobs, observed, args=args))
    try:
        while observed.done < len(jobs) or len(ended) < len(jobs):
            if submitting.done() and submitting.exception() is not None:
                await submitting
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(min(PROGRESS_SECONDS, max(deadline - time.monotonic(), 0)))
            created = sum(1 for record in observed.records.values() if record.created)
            echo(f"submitted {created}/{len(jobs)}, released {observed.done}, ended {len(ended)}")
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


async def _keep_history(
    api_client: client.ApiClient, engine: Any, count: int, *, tenants: int, seed: int
) -> None:
    """`count` TrainingJobs that ended before the controller started, in the cluster (status
    Succeeded, no `ttlSecondsAfterFinished`, the terminated pods of their last attempt kept
    for their logs) and in the store: what a cluster keeps of earlier work, which no step of
    the controller may pay for."""
    kube = Kube(api_client)
    shown = {"status": {"phase": "Succeeded", "finishedAt": "2026-01-01T00:00:00Z"}}

    async def keep(job: workload.Job, tenant: str) -> model.PendingJob:
        document = workload.document(job, run_seconds=0)
        created = await kube.request(
            "POST", resources.TRAINING_JOBS.path(job.namespace), body=document
        )
        await kube.patch(
            resources.TRAINING_JOBS, job.namespace, job.name, shown, subresource="status"
        )
        for replica in range(job.size.replicas):
            pod = _kept_pod(job, replica, uid=str(created["metadata"]["uid"]))
            await kube.create(resources.PODS, job.namespace, pod)
        return trainingjob.pending_job(created, tenant=tenant)

    try:
        kept = workload.jobs(count, tenants=tenants, seed=seed, prefix=HISTORY_PREFIX)
        # workload.jobs spreads jobs round-robin over the tenants
        pending = await asyncio.gather(
            *(keep(job, workload.tenant_name(i % tenants)) for i, job in enumerate(kept))
        )
        await _until_ended(kube, pods=sum(job.size.replicas for job in kept))
    finally:
        await kube.close()
    if not pending:
        return
    sessions = database.session_factory(engine)
    async with sessions() as session, session.begin():
        await store_jobs.enqueue(session, pending, actor="bench", now=time.time())
        await session.execute(ENDED_HISTORY, {"uids": [job.uid for job in pending]})


def _kept_pod(job: workload.Job, replica: int, *, uid: str) -> dict[str, Any]:
    """A pod of gangq's that runs for no time: it ends Succeeded and stays, as a kept pod."""
    labels = {inventory.JOB_NAME_LABEL: job.name, objects.GANG_LABEL: uid}
    return {
        "metadata": {
            "name": f"{job.name}-{replica}",
            "labels": labels,
            "annotations": {kubelet.RUN_SECONDS: "0"},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "work", "image": "busybox:1.36"}],
        },
    }


async def _until_ended(kube: Kube, *, pods: int) -> None:
    """Wait until the kept pods have ended: a pod still running when the controller starts
    belongs to no gang it holds, and would be swept as a leftover of a crash."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        listed = (await kube.list(resources.PODS)).get("items") or []
        ended = sum(
            1
            for pod in listed
            if str(pod["metadata"]["name"]).startswith(HISTORY_PREFIX)
            and (pod.get("status") or {}).get("phase") == "Succeeded"
        )
        if ended >= pods:
            return
        if time.monotonic() > deadline:
            raise GangqError(f"only {ended} of {pods} kept pods ended")
        await asyncio.sleep(PROGRESS_SECONDS / 4)


async def _watch(
    exits: contextlib.AsyncExitStack,
    api_client: client.ApiClient,
    observed: releases.Releases,
    ended: dict[str, str],
) -> None:
    """Pods (their release) and TrainingJobs (their end), as any client would see them."""

    def listener(kind: str, kind_of_event: str, obj: dict[str, Any]) -> None:
        if kind == "pods":
            observed.on_pod(obj, at=time.monotonic())
            return
        meta = obj.get("metadata") or {}
        phase = (obj.get("status") or {}).get("phase")
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if phase in ENDED and key in observed.records:
            ended[key] = str(phase)

    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    sources = (
        ("pods", core.list_pod_for_all_namespaces),
        (
            player.PLURAL,
            functools.partial(
                custom.list_cluster_custom_object, player.GROUP, player.VERSION, player.PLURAL
            ),
        ),
    )
    for kind, call in sources:
        observer = watcher.Watcher(kind, call, listener)
        task = asyncio.create_task(observer.run(), name=f"gangq-bench-watch-{kind}")
        exits.push_async_callback(_cancel, task)
        try:
            await asyncio.wait_for(observer.synced.wait(), timeout=STOP_SECONDS)
        except TimeoutError as error:
            raise GangqError(f"could not list {kind} within {STOP_SECONDS:.0f}s") from error


async def _start_controller(
    exits: contextlib.AsyncExitStack,
    args: argparse.Namespace,
    *,
    served: served_cluster.Served,
    url: str,
) -> tuple[float, Callable[[], Awaitable[float]]]:
    """Start the controller's process and wait until it is ready: the CPU seconds its start
    took, and a call that stops it and gives all its CPU seconds."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        controller_process.RUN,
        f"--kubeconfig={served.controller_kubeconfig}",
        f"--database-url={url}",
        f"--cycle-interval={args.cycle_interval:g}",
        *([f"--profile={args.profile_controller}"] if args.profile_controller else []),
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    output = process.stdout

    async def stop() -> float:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        try:
            lines = await asyncio.wait_for(output.read(), timeout=STOP_SECONDS)
            await asyncio.wait_for(process.wait(), timeout=STOP_SECONDS)
        except TimeoutError as error:
            process.kill()
            await process.wait()
            raise GangqError("the controller did not stop in time") from error
        for line in reversed(lines.splitlines()):
            if line.startswith(b"{"):
                return float(json.loads(line)["cpu_s"])
        raise GangqError("the controller's process did not report its CPU time")

    async def halt() -> None:
        if process.returncode is None:
            process.kill()
            await process.wait()

    exits.push_async_callback(halt)
    line = await asyncio.wait_for(output.readline(), timeout=STOP_SECONDS * 3)
    if not line.startswith(b"controller started"):
        raise GangqError(f"the controller did not start: {line.decode(errors='replace')!r}")
    try:
        line = await asyncio.wait_for(output.readline(), timeout=READY_TIMEOUT_SECONDS)
    except TimeoutError as error:
        raise GangqError(f"the controller was not ready in {READY_TIMEOUT_SECONDS:g}s") from error
    if not line.startswith(b'{"ready_cpu_s"'):
        raise GangqError(f"the controller did not get ready: {line.decode(errors='replace')!r}")
    return float(json.loads(line)["ready_cpu_s"]), stop


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
