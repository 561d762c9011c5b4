"""Plain-text tables and durations for the REST commands: what a person reads in a terminal.

It must not fetch or interpret anything: callers hand in rows of strings.
"""

from __future__ import annotations

from collections.abc import Sequence


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, headers in capitals, like kubectl."""
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    lines = [
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (tuple(h.upper() for h in headers), *rows)
    ]
    return "\n".join(lines)


def duration(seconds: float | None) -> str:
    """45s, 12m, 3h05m, 2d04h: short enough for a column."""
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"
