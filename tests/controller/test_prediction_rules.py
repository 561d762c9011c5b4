"""The edge rules around predictions: which endings are runs, checkpoint values, ETA writes."""

from __future__ import annotations

import pytest

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import checkpoints, estimates, history, objects
from gangq.queue.kube.lifecycle import Action, Ending, Verdict

NOW = 1_790_000_000.0


def ending(kind: Ending, failure: str = "") -> Verdict:
    return Verdict(Action.TEARDOWN, ending=kind, failure=failure)


@pytest.mark.parametrize(
    ("verdict", "was_running", "long_running", "expected"),
    [
        pytest.param(ending(Ending.SUCCEEDED), True, False, True, id="succeeded"),
        pytest.param(ending(Ending.FAILED, "pod_failed"), True, False, True, id="failed"),
        pytest.param(ending(Ending.REQUEUE, "pod_failed"), True, False, True, id="failed-retried"),
        pytest.param(ending(Ending.PREEMPTED), True, False, False, id="evicted"),
        pytest.param(ending(Ending.DELETED), True, False, False, id="deleted"),
        pytest.param(ending(Ending.REQUEUE, "node_lost"), True, False, False, id="node-lost"),
        pytest.param(ending(Ending.FAILED, "other"), True, False, False, id="claim-tampered"),
        pytest.param(ending(Ending.REQUEUE, "timeout"), False, False, False, id="startup-timeout"),
        pytest.param(ending(Ending.SUCCEEDED), False, False, False, id="never-ran"),
        pytest.param(ending(Ending.SUCCEEDED), True, True, False, id="long-running-scaled"),
    ],
)
def test_only_attempts_that_ran_to_their_own_end_are_runs(
    verdict: Verdict, was_running: bool, long_running: bool, expected: bool
) -> None:
    assert (
        history.is_own_end(verdict, was_running=was_running, long_running=long_running) is expected
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-12-01T15:04:05Z", 1796137445.0),
        ("2026-12-01T16:04:05+01:00", 1796137445.0),
        ("2026-12-01T15:04:05.250Z", 1796137445.25),
    ],
)
def test_checkpoint_times_are_rfc3339(value: str, expected: float) -> None:
    assert checkpoints.parse_checkpoint(value, now=expected + 10) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("yesterday", "is not an RFC3339 time"),
        ("", "is not an RFC3339 time"),
        ("2026-12-01T15:04:05", "has no time zone"),
        ("2026-12-01T15:20:00Z", "is in the future"),
    ],
)
def test_bad_checkpoint_values_are_refused_with_the_reason(value: str, problem: str) -> None:
    with pytest.raises(InvalidInputError, match=problem):
        checkpoints.parse_checkpoint(value, now=1796137445.0)


def test_a_checkpoint_a_little_ahead_counts_as_now() -> None:
    """Pods' clocks drift: a report within the tolerance is taken, as of now."""
    assert checkpoints.parse_checkpoint("2026-12-01T15:05:05Z", now=1796137445.0) == 1796137445.0


def stamp(at: float) -> dict[str, str]:
    return {estimates.FIELD: objects.rfc3339(at)}


@pytest.mark.parametrize(
    ("shown", "wanted", "expected"),
    [
        pytest.param(stamp(NOW + 3600), stamp(NOW + 3600), False, id="same"),
        pytest.param(stamp(NOW + 3600), stamp(NOW + 3600 + 600), False, id="10m-of-1h"),
        pytest.param(stamp(NOW + 3600), stamp(NOW + 3600 + 1000), True, id="17m-of-1h"),
        pytest.param(stamp(NOW + 120), stamp(NOW + 170), False, id="under-a-minute"),
        pytest.param(stamp(NOW + 120), stamp(NOW + 190), True, id="70s-of-2m"),
        pytest.param(stamp(NOW - 30), stamp(NOW + 61), True, id="overdue-moves-a-minute"),
        pytest.param({}, stamp(NOW + 600), True, id="appears"),
        pytest.param(stamp(NOW + 600), {}, True, id="disappears"),
    ],
)
def test_the_estimate_is_written_alone_only_when_it_moves_enough(
    shown: dict[str, str], wanted: dict[str, str], expected: bool
) -> None:
    assert estimates.has_moved(shown, wanted, now=NOW) is expected
