"""Storage copies and change counters the emulator's hot paths rely on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gangq.queue.kubesim.clone import clone
from gangq.queue.kubesim.storage import Storage


def test_a_clone_is_equal_and_shares_nothing_mutable() -> None:
    original = {"metadata": {"labels": {"a": "1"}}, "spec": {"items": [{"n": 1}, [2, None]]}}
    copied = clone(original)
    assert copied == original
    copied["metadata"]["labels"]["a"] = "2"
    copied["spec"]["items"][0]["n"] = 5
    copied["spec"]["items"][1].append(3)
    assert original == {
        "metadata": {"labels": {"a": "1"}},
        "spec": {"items": [{"n": 1}, [2, None]]},
    }


def test_a_derived_view_is_rebuilt_after_changes_of_its_own_resource_only() -> None:
    storage = Storage()
    builds: list[list[str]] = []

    def names(objects: Iterator[dict[str, Any]]) -> list[str]:
        builds.append([o["metadata"]["name"] for o in objects])
        return builds[-1]

    assert storage.derived("slices", "names", names) == []
    storage.put("slices", {"metadata": {"name": "s1"}})
    assert storage.derived("slices", "names", names) == ["s1"]
    storage.put("pods", {"metadata": {"namespace": "ns", "name": "p"}})
    assert storage.derived("slices", "names", names) == ["s1"]
    assert len(builds) == 2, "a pod does not rebuild a view of the slices"
    storage.put("slices", {"metadata": {"name": "s1"}, "spec": {}})
    storage.derived("slices", "names", names)
    storage.remove("slices", "", "s1")
    assert storage.derived("slices", "names", names) == []
    assert len(builds) == 4
