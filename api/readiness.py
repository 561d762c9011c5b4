"""What `/readyz` answers from: a database check made on a timer, never per request.

Owns one task per app that runs `SELECT 1` through the app's own pool every few seconds and
keeps the answer (and `gangq_database_up`), so a flood of probes costs PostgreSQL nothing. It
must not open connections of its own: the pool's connections are reused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue import metrics

CHECK_SECONDS = 5.0
CHECK_TIMEOUT_SECONDS = 2.0

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class DatabaseHealth:
    """The latest check's answer; `checked_at` is monotonic seconds (None before the first)."""

    is_up: bool = False
    checked_at: float | None = None
    problem: str = "not checked yet"
    was_up: bool = False
    """Whether a check has succeeded since start: this process then holds answers to serve."""

    async def check(self, engine: AsyncEngine, registry: metrics.Metrics) -> None:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS), engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except (DBAPIError, OSError, TimeoutError, asyncpg.PostgresError) as error:
            if self.is_up or self.checked_at is None:
                logger.warning("PostgreSQL does not answer: %s", error)
            self.is_up, self.problem = False, f"PostgreSQL does not answer: {type(error).__name__}"
        else:
            self.is_up, self.problem, self.was_up = True, "", True
        self.checked_at = time.monotonic()
        metrics.set_database_up(registry, is_up=self.is_up)

    async def watch(self, engine: AsyncEngine, registry: metrics.Metrics) -> None:
        """Check every CHECK_SECONDS until cancelled (the lifespan made the first check)."""
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            await self.check(engine, registry)
