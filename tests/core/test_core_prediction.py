"""Runtime predictions (rule 5) and the work an eviction destroys (rule 6)."""

from __future__ import annotations

import pytest

from gangq.queue.core.device import device_id
from gangq.queue.core.model import JobKey, ReplicaPlacement, RunningJob, Tenant
from gangq.queue.core.prediction import FinishedRun, RunShape, RuntimePredictor, family_of

SHAPE = RunShape("ml-train", "training", 2, 8, "nightly-eval")


def run(runtime_s: float, ended_at: float, shape: RunShape = SHAPE) -> FinishedRun:
    return FinishedRun(shape=shape, runtime_s=runtime_s, ended_at=ended_at)


@pytest.mark.parametrize(
    ("name", "labels", "family"),
    [
        ("nightly-eval-0412", None, "nightly-eval"),
        ("nightly-eval-0412-3", None, "nightly-eval"),
        ("train-llm", None, "train-llm"),
        ("run7", None, "run"),
        ("0412", None, "0412"),
        ("nightly-eval-0412", {"gangq.dev/family": "evals"}, "evals"),
    ],
)
def test_family_is_the_label_or_the_name_without_its_numeric_suffix(
    name: str, labels: dict[str, str] | None, family: str
) -> None:
    assert family_of(name, labels) == family


def test_without_history_the_bound_is_the_prediction() -> None:
    predictor = RuntimePredictor()
    assert predictor.predict(SHAPE, max_runtime_s=7200.0) == 7200.0
    assert predictor.predict(SHAPE, max_runtime_s=None) is None


def test_prediction_is_the_mean_of_the_latest_runs_of_the_same_shape_capped_by_the_bound() -> None:
    other = RunShape("research", "training", 2, 8, "nightly-eval")
    predictor = RuntimePredictor(
        [
            run(100.0, 1.0),
            run(9000.0, 2.0),
            run(300.0, 3.0),
            run(500.0, 4.0),
            run(50.0, 5.0, other),
        ],
        window=3,
    )
    assert predictor.predict(SHAPE, max_runtime_s=None) == pytest.approx((9000 + 300 + 500) / 3)
    assert predictor.predict(SHAPE, max_runtime_s=1000.0) == 1000.0
    assert predictor.predict(other, max_runtime_s=None) == 50.0
    predictor.record(run(700.0, 6.0))
    assert predictor.predict(SHAPE, max_runtime_s=None) == pytest.approx(500.0)


def test_an_outlived_prediction_grows_but_never_past_the_bound() -> None:
    assert RuntimePredictor.outlived(600.0, elapsed_s=300.0, max_runtime_s=None) == 600.0
    assert RuntimePredictor.outlived(600.0, elapsed_s=600.0, max_runtime_s=None) == 900.0
    assert RuntimePredictor.outlived(60.0, elapsed_s=60.0, max_runtime_s=None) == 120.0
    assert RuntimePredictor.outlived(600.0, elapsed_s=700.0, max_runtime_s=800.0) == 800.0


def gang(**fields: float | None) -> RunningJob:
    placement = tuple(
        ReplicaPlacement(
            r, f"gpu-{r}", tuple(device_id("d", f"gpu-{r}", f"g{i}") for i in range(8))
        )
        for r in range(2)
    )
    return RunningJob(
        key=JobKey("ml-train/x"),
        uid="u",
        tenant=Tenant("ml-train"),
        tier="training",
        priority=0,
        device_class="gpu.nvidia.com",
        placement=placement,
        started_at=1000.0,
        **fields,  # type: ignore[arg-type]
    )


def test_lost_work_counts_from_the_start_without_a_checkpoint() -> None:
    assert gang().lost_work_device_s(4600.0) == 16 * 3600.0


def test_lost_work_counts_from_the_last_checkpoint() -> None:
    assert gang(last_checkpoint_at=4000.0).lost_work_device_s(4600.0) == 16 * 600.0


def test_a_declared_interval_bounds_lost_work() -> None:
    assert gang(checkpoint_interval_s=900.0).lost_work_device_s(4600.0) == 16 * 900.0
    assert gang(checkpoint_interval_s=900.0).lost_work_device_s(1300.0) == 16 * 300.0
