"""WATCH streams: replay from a resourceVersion, live events, bookmarks and expiry.

Owns the event filtering a real watch cache applies (an object leaving a selector arrives as
DELETED, entering as ADDED), synthetic ADDED events for `resourceVersion` 0 or omitted, the
`k8s.io/initial-events-end` bookmark, periodic bookmarks, the single 410 ERROR event for a
too-old resourceVersion and the `timeoutSeconds` deadline. It must not write objects.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gangq.queue.kubesim import kinds, listing, status
from gangq.queue.kubesim.storage import ADDED, DELETED, MODIFIED, Event, Storage

BOOKMARK = "BOOKMARK"
ERROR = "ERROR"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
DEFAULT_TIMEOUT_SECONDS = 1800.0

REPLAY_BATCH = 256
"""Initial and replayed events written at once: one write per batch, as kube-apiserver's
buffered writer sends them, without holding a whole list of thousands of objects."""

Send = Callable[[list[dict[str, Any]]], Awaitable[None]]
"""Writes events to the stream as one piece (kube-apiserver flushes only once the events
already waiting are encoded, so a burst reaches the client in few reads)."""


@dataclass(frozen=True, slots=True)
class WatchOptions:
    resource_version: str
    bookmarks: bool
    timeout: float
    send_initial: bool | None
    bookmark_interval: float

    @classmethod
    def from_query(cls, query: Mapping[str, str], *, bookmark_interval: float) -> WatchOptions:
        raw_initial = query.get("sendInitialEvents")
        return cls(
            resource_version=query.get("resourceVersion", ""),
            bookmarks=query.get("allowWatchBookmarks") == "true",
            timeout=_seconds(query.get("timeoutSeconds")),
            send_initial=None if raw_initial is None else raw_initial == "true",
            bookmark_interval=bookmark_interval,
        )


def _seconds(text: str | None) -> float:
    if not text:
        return DEFAULT_TIMEOUT_SECONDS
    if not text.isdigit():
        raise status.bad_request(f'invalid value for timeoutSeconds: "{text}"')
    return float(text)


def bookmark(rt: kinds.ResourceType, resource_version: int, *, initial_end: bool) -> dict[str, Any]:
    """The skeletal object of a BOOKMARK event (corpus 3-23, 3-28)."""
    metadata: dict[str, Any] = {"resourceVersion": str(resource_version)}
    if initial_end:
        metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
    obj: dict[str, Any] = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": metadata}
    if rt.key == kinds.PODS.key:
        obj["spec"] = {"containers": None}
        obj["status"] = {}
    return {"type": BOOKMARK, "object": obj}


def filtered(event: Event, selection: listing.Filter) -> dict[str, Any] | None:
    """The event a selector-filtered watch sees, or None."""
    now = selection.matches(event.object)
    before = event.previous is not None and selection.matches(event.previous)
    if event.type == ADDED:
        kind = ADDED if now else None
    elif event.type == DELETED:
        kind = DELETED if before else None
    elif now and before:
        kind = MODIFIED
    elif now:
        kind = ADDED
    elif before:
        kind = DELETED
    else:
        kind = None
    return None if kind is None else {"type": kind, "object": event.object}


def _expired(resource_version: str, oldest: int) -> dict[str, Any]:
    error = status.expired(f"too old resource version: {resource_version} ({oldest})")
    return {"type": ERROR, "object": error.body()}


async def stream(
    rt: kinds.ResourceType,
    storage: Storage,
    selection: listing.Filter,
    options: WatchOptions,
    send: Send,
) -> None:
    """Serve one watch until its deadline, a drop, or expiry."""
    subscription = storage.subscribe(rt.store_key)
    try:
        last = await _start(rt, storage, selection, options, send)
        if last is None:
            return
        await _follow(rt, subscription.queue, selection, options, send, last=last)
    finally:
        storage.unsubscribe(subscription)


async def _start(
    rt: kinds.ResourceType,
    storage: Storage,
    selection: listing.Filter,
    options: WatchOptions,
    send: Send,
) -> int | None:
    """Initial events; returns the resourceVersion the live phase continues after."""
    version = options.resource_version
    current = storage.resource_version
    initial = options.send_initial if options.send_initial is not None else version in ("", "0")
    if version and version not in ("0",) and int(version) < storage.compacted and not initial:
        await send([_expired(version, storage.compacted + 1)])
        return None
    batch: list[dict[str, Any]] = []
    if initial:
        for obj in list(storage.items(rt.store_key, selection.namespace)):
            if selection.matches(obj):
                batch = await _batched(batch, {"type": ADDED, "object": obj}, send)
        if options.bookmarks and (options.send_initial or not version):
            batch.append(bookmark(rt, current, initial_end=True))
        if batch:
            await send(batch)
        return current
    start = int(version)
    for event in storage.since(rt.store_key, start):
        if event.resource_version > current:
            break
        seen = filtered(event, selection)
        if seen is not None:
            batch = await _batched(batch, seen, send)
    if batch:
        await send(batch)
    return current if start <= current else start


async def _batched(
    batch: list[dict[str, Any]], event: dict[str, Any], send: Send
) -> list[dict[str, Any]]:
    """`batch` with `event` added, or a new empty one once a full batch went out."""
    batch.append(event)
    if len(batch) < REPLAY_BATCH:
        return batch
    await send(batch)
    return []


async def _follow(
    rt: kinds.ResourceType,
    queue: asyncio.Queue[Event | None],
    selection: listing.Filter,
    options: WatchOptions,
    send: Send,
    *,
    last: int,
) -> None:
    deadline = time.monotonic() + options.timeout
    final_bookmark = deadline - 2 if options.bookmarks and options.timeout >= 2 else None
    next_bookmark = time.monotonic() + options.bookmark_interval
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        wake = min(
            deadline, final_bookmark or deadline, next_bookmark if options.bookmarks else deadline
        )
        try:
            async with asyncio.timeout(max(wake - now, 0.001)):
                event = await queue.get()
        except TimeoutError:
            now = time.monotonic()
            if options.bookmarks and (
                (final_bookmark is not None and now >= final_bookmark) or now >= next_bookmark
            ):
                await send([bookmark(rt, last, initial_end=False)])
                final_bookmark = (
                    None if final_bookmark is not None and now >= final_bookmark else final_bookmark
                )
                next_bookmark = now + options.bookmark_interval
            continue
        # Every event already waiting goes out in the same write (see `Send`).
        batch: list[dict[str, Any]] = []
        while event is not None:
            if event.resource_version > last:
                last = event.resource_version
                seen = filtered(event, selection)
                if seen is not None:
                    batch.append(seen)
            if queue.empty():
                break
            event = queue.get_nowait()
        if batch:
            await send(batch)
        if event is None:
            return


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"
