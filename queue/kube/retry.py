"""Retries of Kubernetes requests: the only place that waits and tries again.

Owns which failures are worth another attempt (429, 5xx, connection errors), how long to wait
(the server's Retry-After, else bounded exponential backoff) and how many times. A 409 is not
retried here: the caller re-reads and re-applies, because only it knows the object.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gangq.queue.kube.client import KubeError

T = TypeVar("T")
ATTEMPTS = 5
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 5.0

logger = logging.getLogger(__name__)


def is_retryable(error: KubeError) -> bool:
    """Throttling, server trouble and lost connections pass; the request itself was fine."""
    return error.status in (0, 429) or error.status >= 500


def delay_s(error: KubeError, attempt: int) -> float:
    """Retry-After when the server sent one, else doubling from FIRST_DELAY_S; both bounded."""
    if error.retry_after_s is not None:
        return min(error.retry_after_s, MAX_DELAY_S)
    return min(FIRST_DELAY_S * float(2**attempt), MAX_DELAY_S)


async def retrying(
    operation: Callable[[], Awaitable[T]], *, what: str, attempts: int = ATTEMPTS
) -> T:
    """Run `operation`, again after retryable failures; the last failure is raised."""
    for attempt in range(attempts):
        try:
            return await operation()
        except KubeError as error:
            if not is_retryable(error) or attempt == attempts - 1:
                raise
            pause = delay_s(error, attempt)
            logger.info("%s failed (%s); retry %d in %.2fs", what, error, attempt + 1, pause)
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")
