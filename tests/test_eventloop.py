"""gangq's processes run on uvloop with the young generation's threshold raised."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest
import uvloop

from gangq.queue import eventloop


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds before the test, restored after it."""
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_run_gives_the_coroutines_result_from_a_uvloop_loop(
    thresholds: tuple[int, int, int],
) -> None:
    async def where() -> tuple[type[asyncio.AbstractEventLoop], int]:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()), 42

    loop_type, answer = eventloop.run(where())

    assert loop_type is uvloop.Loop
    assert answer == 42


def test_run_raises_what_the_coroutine_raises_and_closes_its_loop(
    thresholds: tuple[int, int, int],
) -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def fails() -> None:
        seen.append(asyncio.get_running_loop())
        raise LookupError("gone")

    with pytest.raises(LookupError, match="gone"):
        eventloop.run(fails())
    assert seen[0].is_closed()


def test_the_young_generation_threshold_is_raised_and_the_older_ratios_kept(
    thresholds: tuple[int, int, int],
) -> None:
    gc.set_threshold(700, 10, 10)

    eventloop.tune_collector()

    assert gc.get_threshold() == (eventloop.YOUNG_GENERATION_THRESHOLD, 10, 10)
