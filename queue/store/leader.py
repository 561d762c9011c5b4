"""Leadership: one controller process runs cycles; a stale one can never commit (fencing).

The leader holds a session-level advisory lock on a dedicated connection. On taking the lock it
raises the epoch in the one-row `leadership` table and writes a token of its own (the term);
every admission transaction re-reads that row `FOR SHARE` and aborts unless epoch and token
are still its own, and so does every other write the leader makes (lifecycle steps, releases,
enqueues) through `Fenced.transaction`. A new leader's update waits for an old transaction in
flight, so after a takeover nothing the old leader decided commits. The token matters after a
failover that lost commits: the promoted standby may hand out again an epoch that a deposed
leader still holds, never its token.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Collection
from typing import NamedTuple

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import database
from gangq.queue.store.errors import NotLeaderError

LOCK_KEY = 0x6761_6E67_7100
"""Advisory lock id of the leader ("gangq" in ASCII, shifted)."""

TAKE_LOCK = "SELECT pg_try_advisory_lock($1)"
RAISE_EPOCH = (
    "UPDATE leadership SET epoch = epoch + 1, holder = $1, term = $2, acquired_at = now() "
    "WHERE id = 1 RETURNING epoch"
)
READ_TERM_FOR_SHARE = text("SELECT epoch, term FROM leadership WHERE id = 1 FOR SHARE")
UNLOCK = "SELECT pg_advisory_unlock($1)"

_CONNECTION_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)
"""What a lost or broken lock connection raises; asyncpg reports one whose previous operation
was cut off by a killed backend as InternalClientError ("another operation is in progress")."""

logger = logging.getLogger(__name__)


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Term(NamedTuple):
    """One leadership: what every fenced write checks."""

    epoch: int
    token: str


class Leadership:
    """Campaign for and hold leadership on a connection of its own (never from the pool)."""

    def __init__(self, url: str, *, holder: str | None = None) -> None:
        self._dsn = database.libpq_url(url)
        self.holder = holder or default_holder()
        self._connection: asyncpg.Connection | None = None
        self.term: Term | None = None

    @property
    def epoch(self) -> int | None:
        return None if self.term is None else self.term.epoch

    async def try_acquire(self) -> bool:
        """Take the lock if free; True while this process leads. Safe to call every loop."""
        if self.term is not None and await self.is_held():
            return True
        self._drop_connection()
        try:
            self._connection = await asyncpg.connect(self._dsn)
            if not await self._connection.fetchval(TAKE_LOCK, LOCK_KEY):
                self._drop_connection()
                return False
            token = uuid.uuid4().hex
            epoch = int(await self._connection.fetchval(RAISE_EPOCH, self.holder, token))
        except _CONNECTION_ERRORS as error:
            logger.warning("leadership campaign of %s failed: %s", self.holder, error)
            self._drop_connection()
            return False
        self.term = Term(epoch, token)
        logger.info("leadership acquired by %s at epoch %d", self.holder, epoch)
        return True

    async def is_held(self) -> bool:
        """False once the lock connection is gone: PostgreSQL has released the lock then."""
        connection = self._connection
        if connection is None or connection.is_closed():
            self.term = None
            return False
        try:
            await connection.fetchval("SELECT 1")
        except _CONNECTION_ERRORS:
            logger.warning("leadership of %s lost with its connection", self.holder)
            self._drop_connection()
            return False
        return True

    async def release(self) -> None:
        """Unlock, then close the lock's connection whatever became of the unlock, a
        cancellation included: an open connection keeps the lock until it closes, and one
        left to the garbage collector keeps it until a collection happens to find it."""
        connection = self._connection
        try:
            if connection is not None and not connection.is_closed():
                try:
                    await connection.fetchval(UNLOCK, LOCK_KEY)
                except _CONNECTION_ERRORS:
                    logger.warning("leadership of %s: unlock failed, closing instead", self.holder)
        finally:
            self._drop_connection()

    def _drop_connection(self) -> None:
        connection, self._connection, self.term = self._connection, None, None
        if connection is not None and not connection.is_closed():
            connection.terminate()


async def fence(session: AsyncSession, term: Term) -> None:
    """Abort the transaction unless `term` is still the newest leader's (held until commit)."""
    epoch, token = (await session.execute(READ_TERM_FOR_SHARE)).one()
    if (epoch, token) != tuple(term):
        raise NotLeaderError(
            f"leadership moved on (epoch {epoch}, this process had {term.epoch}"
            f"{'' if epoch != term.epoch else ' of another term'}): cycle not committed"
        )


class Fenced:
    """The one way the leader writes: each transaction commits only while `term` still leads.

    The term is set by the leader loop each turn; until it is, or after `term` went stale,
    a transaction raises `NotLeaderError` and commits nothing.
    """

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions
        self.term: Term | None = None
        self._changed: set[str] | None = set()

    @contextlib.asynccontextmanager
    async def transaction(
        self, *, changing: Collection[str] | None = None
    ) -> AsyncIterator[AsyncSession]:
        """`changing` names the job records (uids) the transaction writes, so that a reader
        reads again only those (`changed`); without it, any record may have changed."""
        term = self.term
        if term is None:
            raise NotLeaderError("this process does not lead: write not attempted")
        async with self.sessions() as session, session.begin():
            await fence(session, term)
            yield session
        if changing is None or self._changed is None:
            self._changed = None
        else:
            self._changed.update(changing)

    def track(self) -> None:
        """Gather from now on which records commits change (a reader calls it as it reads)."""
        self._changed = set()

    def changed(self) -> set[str] | None:
        """Uids of the records committed since `track`; None when a commit did not say."""
        return None if self._changed is None else set(self._changed)
