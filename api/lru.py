"""A bounded cache with expiry: the least recently used entry leaves first when it is full.

Owns bounding memory that callers can grow (one entry per token or source address): a flood of
new keys evicts old ones one at a time, never the whole cache at once. It must not do I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

Value = TypeVar("Value")


class LruCache(Generic[Value]):
    """At most `capacity` entries, each valid until its own deadline (monotonic seconds)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("an LRU cache holds at least one entry")
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[float, Value]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, *, now: float) -> Value | None:
        """The live value of `key`, which becomes the most recently used; None when absent."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: str, value: Value, *, until: float) -> None:
        self._entries[key] = (until, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
