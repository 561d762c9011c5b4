"""Change notices for live pages: one watcher per API process, pushed to every open stream.

The pages of `/ui` keep one server-sent-event stream open (`/v1/stream`) and fetch their data
again only when it says something they show changed, instead of each browser polling each
endpoint. Whether something changed is learnt once per process, not once per browser: the
watcher compares the cluster view the controller publishes (a new inventory object after each
change of its caches) and one cheap database marker (`jobs.change_marker`) every INTERVAL_S, and
only while at least one stream is open. Notices carry topics, never data: what a caller may
read is decided by the endpoints it then calls. It must not query anything per subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import capacity
from gangq.queue.store import jobs

logger = logging.getLogger(__name__)

INTERVAL_S = 1.0
"""How late a page may learn of a change; one marker query per process per interval."""
CLUSTER = "cluster"
"""Topic: the published cluster view changed (nodes, devices, taints)."""
JOBS = "jobs"
"""Topic: a job changed (phase, history, reservation, queue position, reason, reserved start)."""


class Subscription:
    """Topics changed since the subscriber last looked, merged while it was busy."""

    def __init__(self) -> None:
        self._topics: set[str] = set()
        self._changed = asyncio.Event()

    def notify(self, topics: set[str]) -> None:
        self._topics |= topics
        self._changed.set()

    async def next(self, *, within_s: float) -> set[str]:
        """The topics changed since the last call; empty when `within_s` passed first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout=within_s)
        self._changed.clear()
        topics, self._topics = self._topics, set()
        return topics


class Broadcaster:
    """Runs on the API's event loop; the watcher starts with the first stream and ends after
    the last one closed."""

    def __init__(
        self,
        cluster: capacity.ClusterView | None,
        sessions: async_sessionmaker[AsyncSession],
        *,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._cluster = cluster
        self._sessions = sessions
        self._interval_s = interval_s
        self._subscribers: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self.checks = 0
        """Marker queries made: what a bench compares with the number of open streams."""

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Subscription]:
        subscription = Subscription()
        self._subscribers.add(subscription)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._watch(), name="gangq-api-live")
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        inventory = self._inventory()
        marker = await self._marker()
        while self._subscribers:
            await asyncio.sleep(self._interval_s)
            changed: set[str] = set()
            now_inventory = self._inventory()
            if now_inventory is not inventory:
                inventory = now_inventory
                changed.add(CLUSTER)
            now_marker = await self._marker()
            if now_marker is not None and now_marker != marker:
                marker = now_marker
                changed.add(JOBS)
            if changed:
                for subscription in list(self._subscribers):
                    subscription.notify(changed)

    def _inventory(self) -> object:
        return None if self._cluster is None else self._cluster.inventory()

    async def _marker(self) -> tuple[object, ...] | None:
        """None when the database cannot answer now: no notice, the next interval tries again."""
        self.checks += 1
        try:
            async with self._sessions() as session:
                return await jobs.change_marker(session)
        except (SQLAlchemyError, asyncpg.PostgresError, OSError) as error:
            logger.debug("live change marker unavailable: %s", error)
            return None
