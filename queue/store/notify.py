"""Wake-ups by LISTEN/NOTIFY: new jobs, released devices and quota changes.

Triggers in the schema send the notifications in the writing transaction, so a wake-up is never
seen before its data. LISTEN runs on a dedicated asyncpg connection. A notification is a hint:
`wait` also returns when its timeout passes (the polling safety net) and after a reconnect,
because notifications sent while disconnected are lost.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

import asyncpg  # type: ignore[import-untyped]

from gangq.queue.store import database

CHANNEL = "gangq_wakeup"
JOB = "job"
RELEASE = "release"
QUOTA = "quota"
RECONNECTED = "reconnected"
"""Reported after the listening connection was re-established: state may have changed unseen."""

logger = logging.getLogger(__name__)


class Listener:
    """`async with Listener(url) as listener: reasons = await listener.wait(timeout_s=5)`."""

    def __init__(self, url: str) -> None:
        self._dsn = database.libpq_url(url)
        self._connection: asyncpg.Connection | None = None
        self._reasons: set[str] = set()
        self._woken = asyncio.Event()

    async def __aenter__(self) -> Listener:
        await self._connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _connect(self) -> None:
        connection = await asyncpg.connect(self._dsn)
        connection.add_termination_listener(self._on_terminated)
        await connection.add_listener(CHANNEL, self._on_notification)
        self._connection = connection

    def _on_notification(self, connection: object, pid: int, channel: str, payload: object) -> None:
        self._reasons.add(str(payload))
        self._woken.set()

    def _on_terminated(self, connection: object) -> None:
        logger.warning("LISTEN connection lost; reconnecting on the next wait")
        self._connection = None
        self._woken.set()

    async def wait(self, *, timeout_s: float) -> frozenset[str]:
        """What happened since the last call; empty when the timeout passed first (poll)."""
        if self._connection is None or self._connection.is_closed():
            await self._connect()
            self._reasons.add(RECONNECTED)
        if not self._reasons:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._woken.wait()
            except TimeoutError:
                return frozenset()
        if self._connection is None:
            await self._connect()
            self._reasons.add(RECONNECTED)
        reasons, self._reasons = frozenset(self._reasons), set()
        self._woken.clear()
        return reasons

    async def close(self) -> None:
        """Our own close is no lost connection: the termination listener goes first."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.remove_termination_listener(self._on_terminated)
            if not connection.is_closed():
                await connection.close()
