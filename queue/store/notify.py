"""Wake-ups by LISTEN/NOTIFY: new jobs, released devices and quota changes.

Triggers in the schema send the notifications in the writing transaction, so a wake-up is never
seen before its data. LISTEN runs on a dedicated asyncpg connection. A notification is a hint:
`wait` also returns when its timeout passes (the polling safety net) and after a reconnect,
because notifications sent while disconnected are lost. `wait` may be cancelled at any point
(the controller races it against other wake-ups): a (re)connect runs in a shielded task of its
own, because asyncpg cancelled half-way through connecting leaves a future whose exception
nobody retrieves ("unexpected connection_lost()") and drops the half-made connection.
"""

from __future__ import annotations

import asyncio
import contextlib
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
_CONNECT_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark a connect's failure as seen: its waiter may have been cancelled, and the next
    `wait` starts a fresh connect (and reports that one's failure) anyway."""
    if not task.cancelled():
        task.exception()


class Listener:
    """`async with Listener(url) as listener: reasons = await listener.wait(timeout_s=5)`."""

    def __init__(self, url: str) -> None:
        self._dsn = database.libpq_url(url)
        self._connection: asyncpg.Connection | None = None
        self._reasons: set[str] = set()
        self._woken = asyncio.Event()
        self._connecting: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Listener:
        await self._reconnect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _reconnect(self) -> None:
        """Connect, or join the connect in flight. A caller cancelled meanwhile leaves it to
        finish: it serves the next call, or, if it failed, the next call connects again."""
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.create_task(self._connect(), name="gangq-listen-connect")
            self._connecting.add_done_callback(_retrieved)
        await asyncio.shield(self._connecting)

    async def _connect(self) -> None:
        connection = await asyncpg.connect(self._dsn)
        try:
            connection.add_termination_listener(self._on_terminated)
            await connection.add_listener(CHANNEL, self._on_notification)
        except BaseException:
            connection.terminate()
            raise
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
            await self._reconnect()
            self._reasons.add(RECONNECTED)
        if not self._reasons:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._woken.wait()
            except TimeoutError:
                return frozenset()
        if self._connection is None:
            await self._reconnect()
            self._reasons.add(RECONNECTED)
        reasons, self._reasons = frozenset(self._reasons), set()
        self._woken.clear()
        return reasons

    async def close(self) -> None:
        """Our own close is no lost connection: the termination listener goes first."""
        if self._connecting is not None and not self._connecting.done():
            with contextlib.suppress(*_CONNECT_ERRORS):
                await self._connecting  # cancelling it would leave the error behind
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.remove_termination_listener(self._on_terminated)
            if not connection.is_closed():
                try:
                    await connection.close()
                except (*_CONNECT_ERRORS, asyncpg.InternalClientError):
                    connection.terminate()  # a broken connection cannot say goodbye
