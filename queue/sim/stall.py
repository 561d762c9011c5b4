"""Deadlock detection for partially started gangs (only the device-plugin world makes them).

A mutual block is two or more gangs holding devices for some replicas while none of them can
start its missing replicas on the free devices, yet one could if another released its own: the
gangs wait on each other. Pure: reads the records and free device counts, changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangq.queue.sim.outcome import JobRecord


def _can_complete(record: JobRecord, free: Mapping[str, int]) -> bool:
    job = record.job
    missing = job.replicas - len(record.placement)
    slots = sum(count // job.devices_per_replica for count in free.values())
    return slots >= missing


def _with_released(free: Mapping[str, int], record: JobRecord) -> dict[str, int]:
    merged = dict(free)
    for replica in record.placement.values():
        merged[replica.node] = merged.get(replica.node, 0) + len(replica.devices)
    return merged


def is_mutual_block(partial: Sequence[JobRecord], *, free: Mapping[str, int]) -> bool:
    """True when partial gangs block each other (see the module docstring)."""
    if len(partial) < 2 or any(_can_complete(record, free) for record in partial):
        return False
    return any(
        _can_complete(record, _with_released(free, other))
        for record in partial
        for other in partial
        if other is not record
    )
