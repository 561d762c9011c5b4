"""Release windows: whole-gang releases, their skew, and partial starts (PRODUCT rule 2)."""

from __future__ import annotations

from gangq.queue.demo.gangs import GangTracker
from tests.demo.objects import pod

JOB = "ml-train/train"


def tracker(replicas: int = 4) -> GangTracker:
    gangs = GangTracker(tolerance_s=1.0)
    gangs.on_job(JOB, replicas=replicas)
    return gangs


def create_gated(gangs: GangTracker, replicas: int, *, at: float = 0.0) -> None:
    for replica in range(replicas):
        gangs.on_pod(JOB, f"train-{replica}", pod("train", replica), at=at)


def release(gangs: GangTracker, replica: int, *, at: float) -> list[str]:
    return gangs.on_pod(JOB, f"train-{replica}", pod("train", replica, gated=False), at=at)


def test_a_gang_released_together_is_one_release_with_its_skew() -> None:
    gangs = tracker()
    create_gated(gangs, 4)
    lines = [line for r in range(4) for line in release(gangs, r, at=1.0 + r * 0.002)]
    assert lines == ["ml-train/train: 4 pods released together, skew 6 ms"]
    assert gangs.partial_starts == []
    assert round(gangs.max_release_skew_ms, 3) == 6.0


def test_a_gang_left_half_released_is_a_partial_start() -> None:
    gangs = tracker()
    create_gated(gangs, 4)
    release(gangs, 0, at=1.0)
    release(gangs, 1, at=1.0)
    assert gangs.tick(at=1.5) == []
    assert gangs.tick(at=2.5) == [
        "partial start of ml-train/train: train-0, train-1 released while train-2, train-3 "
        "gated or missing"
    ]
    assert gangs.tick(at=3.0) == []
    assert len(gangs.partial_starts) == 1


def test_a_released_pod_whose_siblings_were_never_created_is_a_partial_start() -> None:
    gangs = tracker(replicas=3)
    gangs.on_pod(JOB, "train-0", pod("train", 0), at=0.0)
    release(gangs, 0, at=0.1)
    assert gangs.finish(at=0.2) == [
        "partial start of ml-train/train: train-0 released while #1, #2 gated or missing"
    ]


def test_pods_created_without_the_gate_open_a_window_too() -> None:
    gangs = tracker(replicas=2)
    gangs.on_pod(JOB, "train-0", pod("train", 0, gated=False, phase="Running"), at=0.0)
    assert len(gangs.finish(at=5.0)) == 1


def test_a_scale_up_is_a_gang_of_its_own() -> None:
    """Replicas 0-1 run; the added replica 2 is gated then released alone: no partial start."""
    gangs = tracker(replicas=2)
    create_gated(gangs, 2)
    release(gangs, 0, at=1.0)
    release(gangs, 1, at=1.0)
    gangs.on_job(JOB, replicas=3)
    gangs.on_pod(JOB, "train-2", pod("train", 2), at=10.0)
    assert gangs.tick(at=20.0) == []
    assert release(gangs, 2, at=20.0) == []
    assert gangs.finish(at=30.0) == []
    assert [r.pods for r in gangs.releases] == [2, 1]


def test_a_gated_gang_torn_down_before_release_is_neither_release_nor_partial() -> None:
    gangs = tracker(replicas=2)
    create_gated(gangs, 2)
    for replica in range(2):
        gangs.on_pod(JOB, f"train-{replica}", None, at=5.0)
    assert gangs.finish(at=10.0) == []
    assert gangs.releases == []
