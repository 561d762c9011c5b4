"""When a queued job's status change also deserves an Event: it starts waiting, or it waits
for another kind of reason (pure, from the shown and the wanted status)."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.kube import status


def _queued(reason: str, code: str) -> dict[str, Any]:
    conditions = [{"type": "Admitted", "status": "False", "reason": code, "message": reason}]
    return {"phase": "Queued", "reason": reason, "conditions": conditions}


CAPACITY = _queued("capacity: needs 2 nodes with 8 free H100, best has 1", "Capacity")


@pytest.mark.parametrize(
    ("current", "wanted", "expected"),
    [
        ({}, CAPACITY, ("Capacity", CAPACITY["reason"])),
        (
            CAPACITY,
            _queued("capacity: needs 2 nodes with 8 free H100, best has 0", "Capacity"),
            None,
        ),
        (
            CAPACITY,
            _queued("quota: tenant t uses 8/8 nominal", "Quota"),
            ("Quota", "quota: tenant t uses 8/8 nominal"),
        ),
        (CAPACITY, {"phase": "Admitted", "reason": "", "conditions": []}, None),
        ({"phase": "Running"}, _queued("", "Queued"), None),
    ],
    ids=["starts-waiting", "same-kind-of-wait", "another-kind-of-wait", "admitted", "no-reason"],
)
def test_an_event_tells_a_new_wait(
    current: dict[str, Any], wanted: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    assert status.new_wait(current, wanted) == expected


def test_a_kind_of_wait_told_before_in_this_wait_is_not_told_again() -> None:
    quota = _queued("quota: tenant t uses 8/8 nominal", "Quota")
    assert status.new_wait(quota, CAPACITY, told={"Capacity", "Quota"}) is None
    assert status.new_wait(quota, CAPACITY, told={"Quota"}) == ("Capacity", CAPACITY["reason"])


def test_the_kind_of_wait_a_status_shows() -> None:
    assert status.wait_kind(CAPACITY) == "Capacity"
    assert status.wait_kind({"phase": "Queued", "reason": "name in use", "conditions": []}) == ""
    assert status.wait_kind({"phase": "Running", "conditions": CAPACITY["conditions"]}) is None
