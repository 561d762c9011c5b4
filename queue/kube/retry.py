"""Retries of Kubernetes requests: the only place that waits and tries again.

Owns which failures are worth another attempt (429, 5xx, connection errors), how long to wait
(the server's Retry-After, else bounded exponential backoff) and how many times. A 409 is not
retried here: the caller re-reads and re-applies, because only it knows the object.

Both are expected in a busy cluster (kube-controller-manager updates claims gangq also writes),
so they are logged at DEBUG and counted in `gangq_api_retries_total{resource,reason}` of the
registry the controller installs with `counting_in` (a context variable: every task the
controller starts inherits it, and two controllers in one process count apart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TypeVar

from gangq.queue import metrics as gangq_metrics
from gangq.queue.kube.client import KubeError

T = TypeVar("T")
ATTEMPTS = 5
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 5.0

logger = logging.getLogger(__name__)

_registry: ContextVar[gangq_metrics.Metrics | None] = ContextVar(
    "gangq_api_retry_registry", default=None
)


@contextlib.contextmanager
def counting_in(metrics: gangq_metrics.Metrics) -> Iterator[None]:
    """Count the retries and conflicts of the work started inside in `metrics`."""
    token = _registry.set(metrics)
    try:
        yield
    finally:
        _registry.reset(token)


def reason_of(error: KubeError) -> str:
    if error.status == 409:
        return "conflict"
    if error.status == 429:
        return "throttled"
    if error.status == 0:
        return "unreachable"
    return "server_error" if error.status >= 500 else "other"


def note_expected(error: KubeError, *, what: str) -> None:
    """A race or transient failure that is tried again: DEBUG, and counted."""
    logger.debug("%s: %s; tried again", what, error)
    metrics = _registry.get()
    if metrics is not None:
        gangq_metrics.record_api_retry(metrics, resource=error.resource, reason=reason_of(error))


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
            note_expected(error, what=f"{what} (retry {attempt + 1})")
            await asyncio.sleep(delay_s(error, attempt))
    raise AssertionError("unreachable")
