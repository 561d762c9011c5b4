"""Retries of Kubernetes requests: the only place that waits and tries again.

Owns which failures are worth another attempt (429, 5xx, connection errors), how long to wait
(the server's Retry-After, else bounded exponential backoff) and how many times; after a call
gives up, the object is left alone for a while that doubles per failed call (capped), so a
write that keeps failing is not repeated every step. A refusal sending the same request again
cannot cure (400 BadRequest, 401 Unauthorized, 403 Forbidden, 422 Invalid) is not retried: the
object pauses the same way, and the refusal is reported to whoever is `collecting` refusals
around the writes, which decides from it (module `blame`) whether the job's spec or gangq is at
fault. A 409 is not retried here: the caller re-reads and re-applies, because only it knows the
object.

Retries and conflicts are expected in a busy cluster (kube-controller-manager updates claims
gangq also writes), so they are logged at DEBUG and counted in
`gangq_api_retries_total{resource,reason}` of the registry the controller installs with
`counting_in` (a context variable: every task the controller starts inherits it, and two
controllers in one process count apart). Refusals that are gangq's own fault are counted in
`gangq_api_errors_total{resource,code}` of the same registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from gangq.queue import metrics as gangq_metrics
from gangq.queue.kube import blame
from gangq.queue.kube.client import KubeError

T = TypeVar("T")
ATTEMPTS = 5
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 5.0
PERMANENT = (400, 401, 403, 422)
"""BadRequest, Invalid, Unauthorized and Forbidden: the request or gangq's access is wrong,
sending it again cannot help until someone changes the job or gangq's access."""
OBJECT_FIRST_PAUSE_S = 1.0
OBJECT_MAX_PAUSE_S = 300.0
PAUSED_KEPT = 10_000

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


class BackingOff(KubeError):
    """A call not sent: its object is pausing after failed calls."""


def is_retryable(error: KubeError) -> bool:
    """Throttling, server trouble and lost connections pass; the request itself was fine."""
    return error.status in (0, 429) or error.status >= 500


def is_permanent(error: KubeError) -> bool:
    return error.status in PERMANENT


def delay_s(error: KubeError, attempt: int) -> float:
    """Retry-After when the server sent one, else doubling from FIRST_DELAY_S; both bounded."""
    if error.retry_after_s is not None:
        return min(error.retry_after_s, MAX_DELAY_S)
    return min(FIRST_DELAY_S * float(2**attempt), MAX_DELAY_S)


class ObjectBackoff:
    """Per object (the `what` of a call), when it may be tried again after failed calls."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._paused: dict[str, tuple[int, float]] = {}
        """what -> (failed calls in a row, monotonic time before which it is not tried)."""

    def remaining_s(self, what: str) -> float:
        found = self._paused.get(what)
        return 0.0 if found is None else max(0.0, found[1] - self._clock())

    def failed(self, what: str) -> float:
        """Record a failed call; returns the pause before the next one."""
        now = self._clock()
        if len(self._paused) > PAUSED_KEPT:
            # objects that failed long ago and were never tried again (deleted, say)
            stale = now - OBJECT_MAX_PAUSE_S
            self._paused = {k: v for k, v in self._paused.items() if v[1] > stale}
        failures = self._paused.get(what, (0, 0.0))[0] + 1
        pause = min(OBJECT_FIRST_PAUSE_S * 2.0 ** (failures - 1), OBJECT_MAX_PAUSE_S)
        self._paused[what] = (failures, now + pause)
        return pause

    def succeeded(self, what: str) -> None:
        self._paused.pop(what, None)


BACKOFF = ObjectBackoff()
"""The process's pauses, shared by every writer (objects are named the same by all)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call the API server refused for good: `what` names it, `error` is the answer."""

    what: str
    error: KubeError

    def message(self) -> str:
        return f"{self.what}: {self.error.message}"


class Refusals:
    """Refusals that retrying cannot fix, gathered while a caller drives some writes."""

    def __init__(self) -> None:
        self.found: list[Refusal] = []

    def __bool__(self) -> bool:
        return bool(self.found)

    @property
    def messages(self) -> list[str]:
        return [refusal.message() for refusal in self.found]


_SINK: ContextVar[Refusals | None] = ContextVar("gangq_refusals", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[Refusals]:
    """Gather the permanent refusals of the writes made inside (tasks they start included)."""
    found = Refusals()
    token = _SINK.set(found)
    try:
        yield found
    finally:
        _SINK.reset(token)


def _refused(refusal: Refusal) -> None:
    """Report a refusal to the collecting caller; one that is gangq's own fault is counted."""
    sink = _SINK.get()
    if sink is not None:
        sink.found.append(refusal)
    metrics = _registry.get()
    if metrics is not None and not blame.is_the_jobs(refusal.error):
        error = refusal.error
        gangq_metrics.record_api_error(metrics, resource=error.resource, code=error.status)


async def retrying(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    attempts: int = ATTEMPTS,
    backoff: ObjectBackoff = BACKOFF,
) -> T:
    """Run `operation`, again after retryable failures; the last failure is raised. An object
    still pausing after failed calls is not tried (`BackingOff`)."""
    waiting = backoff.remaining_s(what)
    if waiting > 0:
        raise BackingOff(429, f"{what}: not tried for {waiting:.0f}s more after failures")
    for attempt in range(attempts):
        try:
            result = await operation()
        except KubeError as error:
            if is_permanent(error):
                backoff.failed(what)
                _refused(Refusal(what, error))
                raise
            if not is_retryable(error) or attempt == attempts - 1:
                if is_retryable(error):
                    pause = backoff.failed(what)
                    logger.info("%s failed (%s); next try in %.0fs", what, error, pause)
                raise
            note_expected(error, what=f"{what} (retry {attempt + 1})")
            await asyncio.sleep(delay_s(error, attempt))
        else:
            backoff.succeeded(what)
            return result
    raise AssertionError("unreachable")
