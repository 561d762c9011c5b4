"""Pending reasons and victim reasons: the exact texts people read (PRODUCT rule 10)."""

from __future__ import annotations

import pytest

from gangq.queue.core import explain
from gangq.queue.core.explain import PendingReason, ReasonCode, WaitCause


@pytest.mark.parametrize(
    ("reason", "code", "message"),
    [
        pytest.param(
            explain.quota_exceeded(
                tenant="ml-train",
                used=32,
                nominal=32,
                borrowing_limit=0,
                needed=8,
                device_class="H100",
            ),
            ReasonCode.QUOTA,
            "quota: tenant ml-train uses 32/32 nominal, borrowing limit 0, job needs 8 H100",
            id="quota",
        ),
        pytest.param(
            explain.tier_not_allowed(tenant="ml-train", tier="prod-inference", allowed=("small",)),
            ReasonCode.QUOTA,
            "quota: tenant ml-train may not use tier prod-inference (allowed: small)",
            id="tier-not-allowed",
        ),
        pytest.param(
            explain.capacity(
                replicas=4,
                devices_per_replica=8,
                device_class="H100",
                constraints=(),
                domain_key="gangq.dev/rack",
                usable=5,
                best_domain=3,
                lacking_room=0,
            ),
            ReasonCode.CAPACITY,
            "capacity: needs 4 nodes with 8 free H100 in one rack, best rack has 3",
            id="capacity-required-topology",
        ),
        pytest.param(
            explain.capacity(
                replicas=1,
                devices_per_replica=2,
                device_class="gpu",
                constraints=("gpu.example.com/numa",),
                domain_key=None,
                usable=0,
                best_domain=None,
                lacking_room=2,
            ),
            ReasonCode.CAPACITY,
            "capacity: needs 1 node with 2 free gpu sharing numa, 0 have them "
            "(2 more lack cpu, memory or pod room)",
            id="capacity-constraint-and-room",
        ),
        pytest.param(
            explain.backfill(head="ml-train/train-llm", start_in_s=720),
            ReasonCode.BACKFILL,
            "backfill: waiting behind ml-train/train-llm, reserved start in ~12m",
            id="backfill",
        ),
        pytest.param(
            explain.preemption(victims=("a/1", "a/2", "a/3", "a/4")),
            ReasonCode.PREEMPTION,
            "preemption: waiting for 4 gangs to be evicted (a/1, a/2, a/3 and 1 more)",
            id="preemption",
        ),
        pytest.param(
            explain.preemption(victims=("ml-train/x",), cost_device_h=3.14),
            ReasonCode.PREEMPTION,
            "preemption: waiting for 1 gang to be evicted (ml-train/x), costs 3.1 device-h",
            id="preemption-cost",
        ),
        pytest.param(
            explain.preemption_does_not_pay(
                victims=("ml-train/x",),
                cost_device_h=3.14,
                idle=2,
                idled_device_h=1.0,
                evict_in_s=2925,
                free_in_s=420,
            ),
            ReasonCode.PREEMPTION,
            "preemption: evicting ml-train/x costs 3.1 device-h, more than waiting: the 2 free "
            "devices of its place idled 1.0 device-h meanwhile; evicting pays in ~49m at the "
            "earliest (devices free in ~7m by prediction)",
            id="preemption-does-not-pay",
        ),
        pytest.param(
            explain.preemption_does_not_pay(
                victims=("ml-train/x", "ml-train/y", "ml-train/z"),
                cost_device_h=3.14,
                idle=0,
                idled_device_h=0.0,
                evict_in_s=None,
                free_in_s=None,
            ),
            ReasonCode.PREEMPTION,
            "preemption: evicting ml-train/x, ml-train/y and 1 more costs 3.1 device-h, more "
            "than waiting: no free device of its place idles meanwhile; evicting never pays "
            "while their unsaved work grows as fast (no devices predicted to free)",
            id="preemption-does-not-pay-nothing-idles",
        ),
        pytest.param(
            explain.waiting_is_cheaper(
                victims=("ml-train/x",),
                cost_device_h=3.14,
                idle=1,
                idle_device_h=0.5,
                free_in_s=1800,
            ),
            ReasonCode.PREEMPTION,
            "preemption: evicting ml-train/x costs 3.1 device-h, more than waiting: devices "
            "free in ~30m by prediction, while the 1 free device of its place idles 0.5 device-h",
            id="waiting-is-cheaper",
        ),
        pytest.param(
            explain.reclaim_patience(
                tenant="ml-train",
                kept_device_h=2.0,
                cost_device_h=8.5,
                evict_in_s=2925,
                free_in_s=420,
            ),
            ReasonCode.PREEMPTION,
            "preemption: reclaim waits: evicting borrowers costs 8.5 device-h, its wait kept "
            "tenant ml-train 2.0 device-h from its nominal quota; evicting pays in ~49m at the "
            "earliest (borrowed devices free in ~7m by prediction)",
            id="reclaim-patience",
        ),
        pytest.param(
            explain.reclaim_patience(
                tenant="ml-train",
                kept_device_h=2.0,
                cost_device_h=573.0,
                evict_in_s=None,
                free_in_s=None,
            ),
            ReasonCode.PREEMPTION,
            "preemption: reclaim waits: evicting borrowers costs 573.0 device-h, its wait "
            "kept tenant ml-train 2.0 device-h from its nominal quota; evicting never pays while "
            "their unsaved work grows as fast (no borrowed devices predicted to free)",
            id="reclaim-patience-never",
        ),
        pytest.param(
            explain.unsaved_borrow(
                tenant="research", run_s=None, needed=8, free=16, left=16, device_class="gpu"
            ),
            ReasonCode.QUOTA,
            "quota: tenant research would borrow for an unbounded run without checkpoints, "
            "which leaves 16 of the 16 free gpu to tenants under nominal who may reclaim them; "
            "job needs 8",
            id="unsaved-borrow",
        ),
        pytest.param(
            explain.backfill(head="a/head", start_in_s=720, outlived=("b/long",)),
            ReasonCode.BACKFILL,
            "backfill: waiting behind a/head, reserved start in ~12m (later than planned: "
            "b/long outlived its prediction)",
            id="backfill-outlived",
        ),
        pytest.param(
            explain.invalid("unknown tier 'gold'"),
            ReasonCode.INVALID,
            "invalid: unknown tier 'gold'",
            id="invalid",
        ),
        pytest.param(
            explain.with_reserved_start(
                PendingReason(ReasonCode.CAPACITY, "capacity: x"), start_in_s=3 * 3600 + 300
            ),
            ReasonCode.CAPACITY,
            "capacity: x; reserved start in ~3h05m",
            id="reserved-start",
        ),
    ],
)
def test_pending_reason_texts(reason: PendingReason, code: ReasonCode, message: str) -> None:
    assert (reason.code, reason.message) == (code, message)
    assert reason.message.startswith(f"{code.value}: ")


def test_each_waiting_reason_names_its_cause() -> None:
    """The simulator sums waits by cause: the preemption code alone mixes three of them."""
    causes = [
        explain.quota_exceeded(
            tenant="t", used=1, nominal=1, borrowing_limit=0, needed=1, device_class="gpu"
        ).cause,
        explain.tier_not_allowed(tenant="t", tier="x", allowed=("small",)).cause,
        explain.owed(tenant="t", needed=1, free=1, owed=1, device_class="gpu").cause,
        explain.with_reserved_start(
            explain.capacity(
                replicas=1,
                devices_per_replica=1,
                device_class="gpu",
                constraints=(),
                domain_key=None,
                usable=0,
                best_domain=None,
                lacking_room=0,
            ),
            start_in_s=60,
        ).cause,
        explain.backfill(head="a/b", start_in_s=60).cause,
        explain.preemption(victims=("a/b",)).cause,
        explain.preemption_does_not_pay(
            victims=("a/b",),
            cost_device_h=1.0,
            idle=1,
            idled_device_h=0.0,
            evict_in_s=None,
            free_in_s=None,
        ).cause,
        explain.reclaim_patience(
            tenant="t", kept_device_h=0.0, cost_device_h=1.0, evict_in_s=60, free_in_s=None
        ).cause,
        explain.unsaved_borrow(
            tenant="t", run_s=7200, needed=1, free=1, left=1, device_class="gpu"
        ).cause,
    ]
    assert causes == [
        WaitCause.LIMIT,
        WaitCause.LIMIT,
        WaitCause.OWED,
        WaitCause.CAPACITY,
        WaitCause.BACKFILL,
        WaitCause.EVICTING,
        WaitCause.NOT_PAYING,
        WaitCause.RECLAIM_PATIENCE,
        WaitCause.UNSAVED,
    ]


def test_victim_reason_texts() -> None:
    assert (
        explain.preempted_by(
            preemptor="ml-train/train-llm",
            preemptor_tier="training",
            victim_tier="small",
            lost_device_h=0.25,
        )
        == "preempted by ml-train/train-llm (tier training > small), losing 0.2 device-h "
        "since the last checkpoint"
    )
    assert (
        explain.reclaimed(
            victim_tenant="ml-infer", preemptor="ml-train/train-llm", lost_device_h=3.14
        )
        == "reclaim: tenant ml-infer back under nominal for ml-train/train-llm, losing "
        "3.1 device-h since the last checkpoint"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "~0s"), (45, "~45s"), (60, "~1m"), (719, "~12m"), (3600, "~1h00m"), (5400, "~1h30m")],
)
def test_durations_read_approximately(seconds: float, text: str) -> None:
    assert explain.approximately(seconds) == text
