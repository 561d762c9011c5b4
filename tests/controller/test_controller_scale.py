"""Scale-up and scale-down of a running prod-inference job (PRODUCT §5)."""

from __future__ import annotations

from gangq.queue.kube import resources
from tests.controller.conftest import Harness, training_job, wait_for


def _placement(harness: Harness) -> list[object]:
    """The serving job's shown placement (no status at all until it is queued)."""
    job = harness.job("serve", "inference") or {}
    return list((job.get("status") or {}).get("placement") or [])


def _pods(harness: Harness, namespace: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in harness.objects(resources.PODS, namespace)
        if (p.get("status") or {}).get("phase") == "Running"
    }


def _short_small() -> dict[str, object]:
    """A small job bounded within the hour: cheap to clear, so it may take the room the
    serving tenant could scale into (a longer one would leave it to a scale-up that may come
    at any time, core module `serving`)."""
    return training_job(
        "ci", tier="small", replicas=1, devices=8, run_seconds=None, maxRuntimeSeconds=1800
    )


async def test_scale_up_preempts_small_jobs_and_scale_down_keeps_the_rest(harness: Harness) -> None:
    tiers = tuple(
        t.model_copy(update={"min_runtime_before_preemption_s": 0.0})
        for t in harness.settings.tiers
    )
    harness.start(tiers=tiers)
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)
    await wait_for(lambda: harness.phase("serve", "inference") == "Running")
    small = _short_small()
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", small)
    await wait_for(lambda: harness.phase("ci") == "Running")
    first = _pods(harness, "inference")
    await harness.kube.patch(
        resources.TRAINING_JOBS, "inference", "serve", {"spec": {"replicas": 2}}
    )
    await wait_for(lambda: set(_pods(harness, "inference")) == {"serve-0", "serve-1"})
    assert _pods(harness, "inference")["serve-0"] == first["serve-0"]
    await wait_for(lambda: harness.phase("ci") == "Queued")
    assert (harness.job("ci") or {})["status"]["preemptions"] == 1
    await wait_for(lambda: len(_placement(harness)) == 2)
    await harness.kube.patch(
        resources.TRAINING_JOBS, "inference", "serve", {"spec": {"replicas": 1}}
    )
    await wait_for(lambda: set(_pods(harness, "inference")) == {"serve-0"})
    await wait_for(lambda: len(harness.objects(resources.RESOURCE_CLAIMS, "inference")) == 1)
    assert _pods(harness, "inference")["serve-0"] == first["serve-0"]
    await wait_for(lambda: harness.phase("ci") == "Running")


async def test_scale_down_below_the_first_admission_releases_the_highest_replicas(
    harness: Harness,
) -> None:
    harness.start()
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=2, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)
    await wait_for(lambda: set(_pods(harness, "inference")) == {"serve-0", "serve-1"})
    first = _pods(harness, "inference")["serve-0"]
    await harness.kube.patch(
        resources.TRAINING_JOBS, "inference", "serve", {"spec": {"replicas": 1}}
    )
    await wait_for(lambda: len(_placement(harness)) == 1)
    assert set(_pods(harness, "inference")) == {"serve-0"}
    assert _pods(harness, "inference")["serve-0"] == first
    assert [
        c["metadata"]["name"] for c in harness.objects(resources.RESOURCE_CLAIMS, "inference")
    ] == ["serve-0"]
    small = _short_small()
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", small)
    await wait_for(lambda: harness.phase("ci") == "Running")
    await harness.kube.patch(
        resources.TRAINING_JOBS, "inference", "serve", {"spec": {"replicas": 2}}
    )
    await wait_for(
        lambda: (
            (harness.job("serve", "inference") or {})["status"]
            .get("reason", "")
            .startswith("scale-up to replica 1+ waits: ")
        )
    )
    assert harness.phase("serve", "inference") == "Running"
    assert _pods(harness, "inference")["serve-0"] == first
