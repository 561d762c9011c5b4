"""Per-source rate limits: a token bucket for each client address, in a bounded LRU.

Owns deciding whether a source may make one more costly call now (a TokenReview round trip to
the Kubernetes API server) and how long it should wait otherwise. It must not do I/O: the
caller answers 429 with the wait this module computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gangq.api.lru import LruCache


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """`per_second` calls per source on average, `burst` at once; unknown sources start full."""

    def __init__(self, *, per_second: float, burst: int, sources: int = 10_000) -> None:
        self.per_second = per_second
        self.burst = burst
        # A forgotten source starts again with a full bucket: the bound costs at most one
        # burst per eviction, never memory without bound.
        self._buckets: LruCache[_Bucket] = LruCache(sources)

    def acquire(self, source: str, *, now: float) -> float:
        """Take one call for `source`: 0.0 when allowed, else the seconds until one is."""
        bucket = self._buckets.get(source, now=now) or _Bucket(tokens=float(self.burst), at=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now
        wait = 0.0
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
        else:
            wait = (1.0 - bucket.tokens) / self.per_second
        # Kept until full again: after that a fresh bucket is the same.
        self._buckets.put(source, bucket, until=now + self.burst / self.per_second)
        return wait
