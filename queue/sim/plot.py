"""The PNG of a comparison: per policy, devices allocated by tier over time and queue length.

Owns the matplotlib figure only (Agg backend, nothing shown on screen); the numbers come from
the outcomes' timelines unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.sim.outcome import Outcome

HOUR = 3600.0
DAY = 24 * HOUR
_COLORS = {"prod-inference": "#c0392b", "training": "#2e86c1", "small": "#27ae60"}


def _panel(axes: Axes, outcome: Outcome, *, queue_top: int) -> None:
    timeline = outcome.timeline
    days = [t / DAY for t in timeline.times]
    capacity = outcome.trace.cluster.capacity
    base = [0.0] * len(days)
    for tier, column in timeline.allocated_by_tier.items():
        top = [b + c for b, c in zip(base, column, strict=True)]
        axes.fill_between(
            days, base, top, step="post", linewidth=0, color=_COLORS.get(tier), label=tier
        )
        base = top
    axes.axhline(capacity, color="black", linewidth=0.8, linestyle="--", label="capacity")
    axes.set_ylim(0, capacity * 1.05)
    axes.set_ylabel("devices allocated")
    axes.set_title(outcome.policy, loc="left", fontsize=10)
    queue = axes.twinx()
    queue.step(days, timeline.pending_jobs, where="post", color="#555555", linewidth=0.6)
    queue.set_ylabel("jobs waiting", color="#555555")
    queue.set_ylim(0, queue_top)


def write(outcomes: Sequence[Outcome], path: Path) -> None:
    """One panel per policy, stacked with shared axes (days, devices, waiting jobs)."""
    figure, panels = plt.subplots(
        len(outcomes), 1, figsize=(12, 2.8 * len(outcomes)), sharex=True, squeeze=False
    )
    queue_top = max(max(o.timeline.pending_jobs, default=0) for o in outcomes)
    for axes, outcome in zip(panels[:, 0], outcomes, strict=True):
        _panel(axes, outcome, queue_top=max(1, int(queue_top * 1.05)))
    panels[0, 0].legend(loc="upper right", fontsize=8, ncol=4)
    panels[-1, 0].set_xlabel("simulated days")
    save(figure, path)


def save(figure: Figure, path: Path) -> None:
    """Lay the figure out, write it as a PNG and free it; a path that cannot be written is
    the user's error, said as such."""
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=110)
    except OSError as error:
        raise InvalidInputError(f"cannot write {path}: {error.strerror}") from error
    finally:
        plt.close(figure)
