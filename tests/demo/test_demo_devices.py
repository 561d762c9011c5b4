"""Device invariants: no device in two allocated claims, unique identities on running pods."""

from __future__ import annotations

from gangq.queue.demo.devices import DeviceLedger
from tests.demo.objects import claim, pod, resource_slice

ATTRIBUTES = {"gpu.nvidia.com": "uuid"}


def test_a_device_in_two_allocated_claims_is_reported_once() -> None:
    ledger = DeviceLedger()
    assert ledger.on_claim("ml-train/a-0", claim("a-0", "gpu-0", "gpu-1")) == []
    found = ledger.on_claim("ci/b-0", claim("b-0", "gpu-1", namespace="ci"))
    assert found == ["device gpu.nvidia.com/gpu-0/gpu-1 allocated to both ci/b-0 and ml-train/a-0"]
    assert ledger.on_claim("ci/b-0", claim("b-0", "gpu-1", namespace="ci")) == []
    assert len(ledger.double_allocations) == 1


def test_a_device_handed_on_after_deallocation_is_fine() -> None:
    ledger = DeviceLedger()
    ledger.on_claim("ml-train/a-0", claim("a-0", "gpu-1"))
    ledger.on_claim("ml-train/a-0", None)
    assert ledger.on_claim("ci/b-0", claim("b-0", "gpu-1", namespace="ci")) == []
    ledger.on_claim("ci/b-0", claim("b-0", namespace="ci"))
    assert ledger.on_claim("ml-train/c-0", claim("c-0", "gpu-1")) == []
    assert not ledger.double_allocations


def test_one_gpu_published_twice_is_caught_by_its_identity_on_running_pods() -> None:
    """Two pools name the same physical GPU: names differ, the UUID does not."""
    ledger = DeviceLedger()
    ledger.add_slice(resource_slice("gpu-0", {"gpu-0": "GPU-A"}), attributes=ATTRIBUTES)
    ledger.add_slice(resource_slice("shadow", {"gpu-9": "GPU-A"}), attributes=ATTRIBUTES)
    ledger.on_claim("ml-train/a-0", claim("a-0", "gpu-0"))
    ledger.on_claim("ml-train/b-0", claim("b-0", "gpu-9", pool="shadow"))
    assert ledger.on_pod("ml-train/a-0", pod("a", 0, gated=False, claims=("a-0",))) == []
    assert ledger.on_pod("ml-train/b-0", pod("b", 0, gated=False, claims=("b-0",))) == []
    ledger.on_pod("ml-train/a-0", pod("a", 0, gated=False, phase="Running", claims=("a-0",)))
    found = ledger.on_pod(
        "ml-train/b-0", pod("b", 0, gated=False, phase="Running", claims=("b-0",))
    )
    assert found == ["device GPU-A used by running pods ml-train/a-0, ml-train/b-0"]
    assert not ledger.double_allocations
    assert ledger.checked_identities == {"GPU-A"}


def test_devices_without_an_identity_attribute_are_counted() -> None:
    ledger = DeviceLedger()
    ledger.on_claim("ml-train/a-0", claim("a-0", "gpu-3"))
    ledger.on_pod("ml-train/a-0", pod("a", 0, gated=False, phase="Running", claims=("a-0",)))
    assert ledger.unidentified == {("gpu.nvidia.com", "gpu-0", "gpu-3")}
    ledger.on_pod("ml-train/a-0", None)
    assert ledger.running_pods == {}
