"""The web UI in headless Chromium against `gangq demo --serve` (the reference scenario played).

After the demo, llm-prod (tenant prod, 3 x 8) holds 24 of the 64 devices and every other job
has ended; the tests sign in, read each page, check that a viewer of ml-train cannot see
prod's job, and that a job submitted to the emulated cluster appears without a reload.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import Browser, Page

from .ui_browser import Demo, open_page, screenshot, sign_in

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def admin(browser: Browser, demo: Demo) -> Page:
    return sign_in(browser, demo, demo.token)


def submit_job(demo: Demo, name: str, *, replicas: int) -> None:
    """Create a TrainingJob of tenant ml-train in the emulated cluster, as kubectl would."""
    config = yaml.safe_load(demo.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    token = config["users"][0]["user"].get("token")
    body: dict[str, Any] = {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ml-train"},
        "spec": {
            "tier": "training",
            "replicas": replicas,
            "devicesPerReplica": 8,
            "deviceClassName": "gpu.nvidia.com",
            "maxRuntimeSeconds": 3600,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ]
                }
            },
        },
    }
    answer = httpx.post(
        f"{server}/apis/gangq.dev/v1alpha1/namespaces/ml-train/trainingjobs",
        json=body,
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    assert answer.status_code == 201, answer.text


DEMO_CELLS = 72 + 104 + 8
"""One cell per device per class of the reference demo: gpu.nvidia.com has the 64 H100 of the
eight whole-GPU nodes and gpu-8's 8 whole GPUs; partition.gpu.nvidia.com has gpu-8's GPUs whole
and as 12 partitions each; shared.gpu.nvidia.com gpu-9's 8 shared GPUs."""


def test_cluster_shows_every_device_with_its_holder(admin: Page) -> None:
    cells = admin.locator("main .cells .cell")
    assert cells.count() == DEMO_CELLS
    assert "72 devices on 9 nodes" in admin.inner_text("[data-summary='gpu.nvidia.com']")
    assert "8 GPU-equivalents in 104 devices on 1 nodes" in admin.inner_text(
        "[data-summary='partition.gpu.nvidia.com']"
    )
    assert "Largest placeable gang" in admin.inner_text("main")
    held = admin.locator("main .cell.mine")
    assert held.count() == 24
    held.first.focus()
    tip = admin.locator("#tip")
    assert tip.is_visible() and "inference/llm-prod" in tip.inner_text()
    admin.keyboard.press("ArrowRight")
    assert "inference/llm-prod" in (
        admin.evaluate("document.activeElement.getAttribute('aria-label')") or ""
    )
    # gpu-8 and gpu-9 are tainted gangq.dev/slices=true:NoSchedule: their cells (8 whole GPUs,
    # 104 partition cells, 8 shared GPUs) are apart from the free ones, the taint beside them.
    assert admin.locator("main .cells .cell.tainted").count() == 8 + 104 + 8
    assert admin.locator("main .cells .cell.free").count() == DEMO_CELLS - 24 - 120
    assert "tainted gangq.dev/slices=true:NoSchedule" in admin.inner_text("main")
    screenshot(admin, "cluster")
    assert admin.errors == []  # type: ignore[attr-defined]


def test_jobs_and_a_job_with_placement_history_and_log_commands(admin: Page) -> None:
    open_page(admin, "jobs")
    rows = admin.locator("main table tbody tr")
    assert rows.count() >= 15
    assert "ml-train/train-llm-2" in admin.inner_text("main table")
    screenshot(admin, "jobs")
    open_page(admin, "jobs/inference/llm-prod")
    text = admin.inner_text("main")
    assert "prod / prod-inference" in text and "Running" in text
    # A row per replica it runs: its own gang's two and the scale-up gang's third.
    placement = admin.locator("main table").first.locator("tbody tr")
    assert placement.count() == 3
    assert "gpu.nvidia.com/gpu-" in placement.first.inner_text()
    assert "scale-up llm-prod+2" in placement.nth(2).inner_text()
    assert "kubectl logs -n inference llm-prod-0" in text
    assert "gangq logs inference/llm-prod --replica 1" in text
    # Its own gang of two went with a PodGroup, bound together; the one-replica scale-up
    # gang needed none.
    [group] = (
        admin.locator("main table", has_text="binds each group's pods together")
        .locator("tbody tr")
        .all()
    )
    cells = group.locator("td").all_inner_texts()
    assert cells[0].startswith("llm-prod-") and cells[0].endswith("-0-1")
    assert cells[1:3] == ["2", "True"]
    kinds = admin.locator("main ol.timeline li strong").all_inner_texts()
    assert kinds[:3] == ["enqueued", "admitted", "started"]
    started = admin.locator("main ol.timeline li.started").first.inner_text()
    assert "release_skew_ms: " in started
    screenshot(admin, "job")


def test_every_listed_job_opens_a_scale_up_gang_inside_its_job(admin: Page) -> None:
    open_page(admin, "jobs")
    links = admin.locator("main table tbody tr td:first-child a")
    listed = dict(links.evaluate_all("links => links.map(l => [l.textContent, l.hash])"))
    assert listed["inference/llm-prod+2"] == "#/jobs/inference/llm-prod"
    scale_up = admin.locator("main table tbody tr", has_text="inference/llm-prod+2")
    assert "scale-up of llm-prod: replica 2" in scale_up.inner_text()
    # Every link opens its job's page (a gang's and its job's are one page, opened once).
    pages = {route: key.partition("+")[0] for key, route in listed.items()}
    assert len(pages) == len(listed) - 1
    for route, key in pages.items():
        open_page(admin, route.removeprefix("#/"))
        assert admin.inner_text("main h1") == f"Job {key}"
        assert admin.locator("main .error").count() == 0, key
    open_page(admin, "jobs")
    open_page(admin, "jobs/inference/llm-prod")
    gangs = admin.locator("main table", has_text="Replicas added while it ran")
    assert "llm-prod+2" in gangs.inner_text() and "Running" in gangs.inner_text()
    admitted = admin.locator("main ol.timeline li", has_text="of scale-up gang llm-prod+2").nth(1)
    assert "placement: replica 2 on gpu-" in admitted.inner_text()
    assert "kubectl logs -n inference llm-prod-2" in admin.inner_text("main pre")
    screenshot(admin, "job-scale-up")
    # At its own address, as the REST API names it, the gang reads alone.
    open_page(admin, "jobs/inference/llm-prod%2B2")
    assert admin.inner_text("main h1") == "Scale-up gang inference/llm-prod+2"
    assert "It adds replica 2 to job inference/llm-prod" in admin.inner_text("main")
    [replica] = admin.locator("main table").first.locator("tbody tr").all()
    assert replica.locator("td").first.inner_text() == "2"
    assert "kubectl logs -n inference llm-prod-2" in admin.inner_text("main pre")
    assert admin.errors == []  # type: ignore[attr-defined]


def test_a_finished_job_shows_the_nodes_and_devices_it_ran_on(admin: Page) -> None:
    open_page(admin, "jobs/ml-train/train-llm")
    text = admin.inner_text("main")
    assert "Succeeded" in text
    assert "Holds no devices now. Its last attempt ran on gpu-" in text
    ran = admin.locator("main table", has_text="Where its last attempt ran").locator("tbody tr")
    replicas = []
    for row in ran.all():
        replica, node, devices = row.locator("td").all_inner_texts()
        replicas.append(replica)
        assert node.startswith("gpu-")
        assert len(devices.split()) == 8
        assert all(d.startswith(f"gpu.nvidia.com/{node}/") for d in devices.split())
    assert replicas == ["0", "1", "2", "3"]  # 4 x 8
    screenshot(admin, "job-finished")


def test_an_api_error_shows_its_message(admin: Page) -> None:
    """FastAPI's 422 lists the refused fields as objects: the page says what they are."""
    open_page(admin, "jobs/Inference/llm-prod")
    alert = admin.inner_text("main [role=alert]")
    assert alert.startswith("path namespace: String should match pattern"), alert
    assert "[object Object]" not in admin.inner_text("main")
    screenshot(admin, "job-error")


def test_tenants_show_quotas_use_and_the_preemption_ledger(admin: Page) -> None:
    open_page(admin, "tenants")
    quotas = admin.locator("main table").first.inner_text()
    for tenant in ("prod", "ml-train", "ci"):
        assert tenant in quotas
    ledger = admin.locator("main table").nth(2).inner_text()
    assert "ci" in ledger and "prod" in ledger  # small jobs of ci evicted for llm-prod
    screenshot(admin, "tenants")


def test_a_submitted_job_appears_in_the_queue_without_a_reload(admin: Page, demo: Demo) -> None:
    open_page(admin, "queue")
    before = admin.evaluate("document.body.dataset.changes || '0'")
    # 8 x 8 cannot start while llm-prod holds 24 devices: it waits, with a reason.
    submit_job(demo, "too-big", replicas=8)
    admin.wait_for_function(
        "() => document.querySelector('main').innerText.includes('ml-train/too-big')",
        timeout=15_000,
    )
    assert admin.evaluate("document.body.dataset.changes") != before
    row = admin.locator("main table tbody tr", has_text="ml-train/too-big")
    assert "8 \u00d7 8" in row.inner_text()
    assert row.locator("td").nth(3).inner_text().strip() not in ("", "not ranked yet")
    screenshot(admin, "queue")


def test_a_viewer_sees_only_its_tenants_jobs(browser: Browser, demo: Demo) -> None:
    viewer = sign_in(browser, demo, demo.viewers["ml-train"])
    assert viewer.locator("main .cells .cell").count() == DEMO_CELLS
    assert viewer.locator("main .cells .cell.other").count() == 24
    assert "llm-prod" not in viewer.inner_text("main")
    open_page(viewer, "jobs")
    listed = viewer.inner_text("main table")
    assert "ml-train/train-llm" in listed and "inference/" not in listed
    open_page(viewer, "jobs/inference/llm-prod")
    assert "no job inference/llm-prod that you may read" in viewer.inner_text("main")
    open_page(viewer, "tenants")
    assert "prod" not in viewer.locator("main table").first.inner_text().replace("ml-train", "")
    viewer.close()
