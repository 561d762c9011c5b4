"""When a queued job's estimated start is worth a status write of its own.

The estimate (`status.estimatedStartTime`, the start its backfill reservation holds on
predicted runtimes, rule 5) shifts a little in almost every cycle; writing each shift would
cost one API write per waiting job per cycle. It is written with any other status change, and
on its own only when it appears, disappears or moves by more than a minute and by more than a
quarter of the wait it showed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

FIELD = "estimatedStartTime"
MIN_MOVE_S = 60.0
MIN_MOVE_FRACTION = 0.25


def _unix(stamp: object) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


def has_moved(current: Mapping[str, Any], wanted: Mapping[str, Any], *, now: float) -> bool:
    """True when the estimate `wanted` shows differs enough from the one `current` shows."""
    old, new = current.get(FIELD), wanted.get(FIELD)
    if old == new:
        return False
    old_at, new_at = _unix(old), _unix(new)
    if old_at is None or new_at is None:
        return True
    moved = abs(new_at - old_at)
    return moved > MIN_MOVE_S and moved > MIN_MOVE_FRACTION * max(old_at - now, 0.0)
