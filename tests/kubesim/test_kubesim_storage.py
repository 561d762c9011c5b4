"""Storage copies and change counters the emulator's hot paths rely on."""

from __future__ import annotations

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


def test_a_resources_revision_moves_with_its_own_changes_only() -> None:
    storage = Storage()
    assert storage.revision("slices") == 0
    storage.put("slices", {"metadata": {"name": "s1"}})
    first = storage.revision("slices")
    storage.put("pods", {"metadata": {"namespace": "ns", "name": "p"}})
    assert storage.revision("slices") == first
    storage.put("slices", {"metadata": {"name": "s1"}, "spec": {}})
    updated = storage.revision("slices")
    assert updated > first
    storage.remove("slices", "", "s1")
    assert storage.revision("slices") > updated
