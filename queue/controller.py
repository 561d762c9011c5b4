"""The controller loop: caches -> store -> scheduling cycle -> actuator, under leadership.

Owns the order of the steps and nothing else: wait for a wake-up (NOTIFY, cache change, timer
or stop, coalesced), take or keep leadership, turn new TrainingJobs into queue rows, run one
admission cycle with the inventory the caches see, then drive every gang that holds devices
from committed store state (so a restart converges, rule 9). No policy decision is made here:
the decision core decides admissions, `kube.lifecycle` reads a gang's state, `kube.actuator`
writes to the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import asyncpg  # type: ignore[import-untyped]
from kubernetes_asyncio import client
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue import metrics as gangq_metrics
from gangq.queue.config import ControllerSettings
from gangq.queue.kube import cache, reconciler, retry
from gangq.queue.store import database, leader, notify
from gangq.queue.store.errors import StoreError

_OUTAGES = (
    StoreError,
    DBAPIError,
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)
"""Database trouble the loop rides out: it logs, waits and tries again."""

Clock = Callable[[], float]
"""Unix seconds now; tests inject their own, production uses `time.time`."""

logger = logging.getLogger(__name__)


async def run_controller(
    *,
    settings: ControllerSettings,
    api_client: client.ApiClient,
    engine: AsyncEngine,
    stop: asyncio.Event,
    clock: Clock | None = None,
    cluster: cache.ClusterCache | None = None,
    metrics: gangq_metrics.Metrics | None = None,
) -> None:
    """Run until `stop` is set; only the leader acts, a follower keeps campaigning.

    `cluster` is the cluster view to fill (create it with `cache.ClusterCache(api_client,
    settings=settings)` and hand the same object to `gangq.api.app.create_app(cluster=...)`:
    its `.inventory()` is the API's view of the cluster, None until every cache has synced).
    `metrics` is the registry `/metrics` serves; the controller feeds it. Bad user input never
    raises here: it becomes a status condition on the TrainingJob.
    """
    now = clock or time.time
    view = cluster or cache.ClusterCache(api_client, settings=settings)
    await view.use_pod_groups()
    registry = metrics or gangq_metrics.create_metrics()
    sessions = database.session_factory(engine)
    url = engine.url.render_as_string(hide_password=False)
    leadership = leader.Leadership(url, holder=settings.holder)
    work = reconciler.Reconciler(
        view,
        settings=settings,
        sessions=sessions,
        reads=database.read_session_factory(engine),
        clock=now,
        metrics=registry,
    )
    try:
        with retry.counting_in(registry):
            async with asyncio.TaskGroup() as group:
                group.create_task(view.run(stop), name="gangq-watch-caches")
                group.create_task(
                    _lead(work, leadership=leadership, url=url, stop=stop, view=view),
                    name="gangq-leader-loop",
                )
    finally:
        gangq_metrics.set_leader(registry, is_leader=False)
        try:
            await leadership.release()
        finally:
            await view.kube.close()


async def _lead(
    work: reconciler.Reconciler,
    *,
    leadership: leader.Leadership,
    url: str,
    stop: asyncio.Event,
    view: cache.ClusterCache,
) -> None:
    """Campaign until leading, then cycle on every wake-up; step down when the lock is lost."""
    settings = work.settings
    listener = notify.Listener(url)
    try:
        while not stop.is_set():
            try:
                await _turn(work, leadership=leadership, listener=listener, stop=stop, view=view)
            except _OUTAGES as error:
                logger.warning("database unavailable (%s); retrying", error)
                gangq_metrics.set_database_up(work.metrics, is_up=False)
                await _pause(stop, settings.leader_retry_s)
    finally:
        await listener.close()


async def _turn(
    work: reconciler.Reconciler,
    *,
    leadership: leader.Leadership,
    listener: notify.Listener,
    stop: asyncio.Event,
    view: cache.ClusterCache,
) -> None:
    """One turn: campaign, then (as leader, once the caches synced) a step and a wait."""
    settings = work.settings
    is_leader = await leadership.try_acquire()
    gangq_metrics.set_leader(work.metrics, is_leader=is_leader)
    if not is_leader or leadership.term is None:
        await _pause(stop, settings.leader_retry_s)
        return
    if not view.synced.is_set():
        await _first(stop.wait(), view.synced.wait(), timeout_s=settings.cycle_interval_s)
        return
    began = time.monotonic()
    await work.step(term=leadership.term)
    gangq_metrics.set_database_up(work.metrics, is_up=True)
    await _wake(listener, view=view, stop=stop, settings=settings, work=work, began=began)


async def _wake(
    listener: notify.Listener,
    *,
    view: cache.ClusterCache,
    stop: asyncio.Event,
    settings: ControllerSettings,
    work: reconciler.Reconciler,
    began: float,
) -> None:
    """Return on NOTIFY, a cache change, the timer or stop; then let close wake-ups merge.

    A wake-up after a quiet spell is served `coalesce_s` later; under a stream of them the
    next step starts `min_step_interval_s` after the last one began. A step's cost is mostly
    fixed (a cycle's reads, the gangs' state, a round of status): at 10 jobs a second a step
    per wake-up would serve about one job each, for a few milliseconds of work and tens of
    fixed cost, while a paced step serves every job that arrived since, for a wait no longer
    than the interval (`gangq bench e2e --rate`, docs/performance.md).
    """
    timeout_s = min(settings.cycle_interval_s, work.next_deadline_s())
    await _first(
        listener.wait(timeout_s=timeout_s),
        view.changed.wait(),
        stop.wait(),
        timeout_s=timeout_s,
    )
    paced_s = began + settings.min_step_interval_s - time.monotonic()
    await _pause(stop, max(settings.coalesce_s, paced_s))
    view.changed.clear()


async def _first(*waits: object, timeout_s: float) -> None:
    """Wait until the first of `waits` finishes (or the timeout), cancelling the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[call-overload]
    try:
        await asyncio.wait(tasks, timeout=max(timeout_s, 0.0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        # asyncio.wait never swallows a cancellation of this task (suppressing one would).
        await asyncio.wait(tasks)
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
