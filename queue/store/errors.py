"""Errors the store raises on purpose; each says what happened and what a person can do."""

from __future__ import annotations

from gangq.queue.core.errors import GangqError, InvalidInputError


class StoreError(GangqError):
    """The database refused or could not complete an operation; nothing was half-written."""


class ConflictError(InvalidInputError):
    """A write broke a database constraint (a duplicate job, a device already reserved)."""


class SchemaBehindError(StoreError):
    """The database schema is older than this version of gangq expects."""


class NotLeaderError(StoreError):
    """This process no longer leads: its cycle must not commit (fencing)."""
