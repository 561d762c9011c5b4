"""Fault injection: failing the next N matching requests, delaying responses, dropping watches.

Failures answer 409, 429, 500 or 504 (the server's own request timeout, a Status with reason
Timeout); refusals answer a given Status, such as a real cluster sends a client whose
permissions or credentials are wrong (a 403 of RBAC, the 422 of case 11-01 for an allocation
written without `resourceclaims/binding`, a 401). A delay lasts until it is removed
(`undelay`) or every rule is cleared.

Owns the rules tests arm and the decision whether a request is hit. It must not know HTTP
beyond a verb and a resource name; `server.py` consults it before serving a request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gangq.queue.kubesim import status

_CODES = frozenset({409, 429, 500, 504})


@dataclass(slots=True)
class _Failure:
    verb: str | None
    resource: str | None
    code: int
    remaining: int
    answer: status.ApiError | None = None

    def matches(self, verb: str, resource: str) -> bool:
        return self.verb in (None, verb) and self.resource in (None, resource)


@dataclass(slots=True, eq=False)
class _Delay:
    verb: str | None
    resource: str | None
    seconds: float


@dataclass(slots=True)
class Faults:
    _failures: list[_Failure] = field(default_factory=list)
    _delays: list[_Delay] = field(default_factory=list)
    injected: int = 0
    """How many requests were failed on purpose, so a test can assert the fault fired."""

    def fail_next(
        self, count: int, *, code: int, verb: str | None = None, resource: str | None = None
    ) -> None:
        """Fail the next `count` requests with this verb (get, list, watch, create, update,
        patch, delete) on this resource plural (e.g. "pods"); None matches any."""
        if code not in _CODES:
            raise ValueError(f"injected failures use 409, 429, 500 or 504, not {code}")
        self._failures.append(_Failure(verb, resource, code, count))

    def refuse_next(
        self,
        count: int,
        answer: status.ApiError,
        *,
        verb: str | None = None,
        resource: str | None = None,
    ) -> None:
        """Answer the next `count` matching requests with `answer`, unchanged; `clear` lifts
        it sooner."""
        self._failures.append(_Failure(verb, resource, answer.code, count, answer))

    def delay(
        self, seconds: float, *, verb: str | None = None, resource: str | None = None
    ) -> object:
        """Delay matching requests from now on; returns the rule for `undelay`."""
        rule = _Delay(verb, resource, seconds)
        self._delays.append(rule)
        return rule

    def undelay(self, rule: object) -> None:
        if rule in self._delays:
            self._delays.remove(rule)

    def clear(self) -> None:
        self._failures.clear()
        self._delays.clear()

    def delay_for(self, verb: str, resource: str) -> float:
        return sum(
            d.seconds
            for d in self._delays
            if d.verb in (None, verb) and d.resource in (None, resource)
        )

    def check(self, verb: str, resource: str, *, name: str) -> None:
        """Raise the injected error when an armed rule matches this request."""
        for failure in self._failures:
            if failure.remaining > 0 and failure.matches(verb, resource):
                failure.remaining -= 1
                self.injected += 1
                raise failure.answer or _error(failure.code, resource, name)


def _error(code: int, resource: str, name: str) -> status.ApiError:
    if code == 409:
        return status.conflict(resource, "", name)
    if code == 504:
        return status.ApiError(
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted, but may still "
            "be processing the request",
            details={},
        )
    if code == 429:
        return status.too_many_requests(
            "the server has received too many requests and has asked us to try again later",
            retry_after=1,
        )
    return status.internal_error("Internal error occurred: injected fault")
