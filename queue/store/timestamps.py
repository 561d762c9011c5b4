"""Instants at the store's edge: the core counts unix seconds, the database keeps timestamptz."""

from __future__ import annotations

from datetime import UTC, datetime


def to_datetime(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, tz=UTC)


def to_unix(instant: datetime) -> float:
    return instant.timestamp()


def optional_unix(instant: datetime | None) -> float | None:
    return None if instant is None else instant.timestamp()
