"""Web UI load time on a synthetic 2,000-node, 10,000-job state, and API latency with open pages.

Builds the state once on a scratch database: the synthetic cluster (`synthetic.inventory`),
its tenants' quotas, `--jobs` queued jobs, and one real admission cycle that admits what fits
and ranks the rest (positions, reasons, reservations). Serves the API as `gangq run` does (own
thread, published cluster view), then: (1) the latency of `/v1/jobs` and `/v1/queues` reads
with no page open and with `--pages` live streams open (each an open UI page); (2) headless
Chromium (Debian's, through Playwright) signs in and loads each page: the time from navigation
until the page has drawn its data. Prints figures; the goal is a page load of at most 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from gangq.queue import eventloop
from gangq.queue.bench import extras

PAGES = ("cluster", "queue", "jobs", "tenants")
LOAD_GOAL_S = 1.0
CHROMIUM = "/usr/bin/chromium"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=2000, help="nodes of 8 devices")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the queue")
    parser.add_argument("--pages", type=int, default=20, help="live streams held open")
    parser.add_argument("--requests", type=int, default=200, help="reads per latency figure")
    parser.add_argument(
        "--screenshots", type=Path, default=None, help="save a PNG of each page in this folder"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    extras.require("ui", "httpx", "playwright")
    figures = eventloop.run(_measure(args))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>34}  {value}")
    return 0


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from gangq.api import hosting, published
    from gangq.api.app import create_app
    from gangq.api.settings import ApiSettings, AuthMode
    from gangq.queue.demo import stack

    figures: dict[str, Any] = {"nodes": args.nodes, "jobs": args.jobs, "pages": args.pages}
    with stack.token_directory() as directory:
        token, token_file = stack.admin_token_file(Path(directory))
        async with stack.scratch_database() as url:
            started = time.monotonic()
            inventory = await _build_state(url, nodes=args.nodes, jobs=args.jobs)
            figures["state_build_s"] = round(time.monotonic() - started, 1)
            view = published.PublishedCluster(published.Snapshot(inventory=inventory))
            app = create_app(
                ApiSettings(database_url=url, auth_mode=AuthMode.TOKEN_FILE, token_file=token_file),
                cluster=view,
            )
            served = hosting.ApiHost([hosting.Endpoint(app, "127.0.0.1", 0)], name="gangq-bench")
            await served.start_async()
            try:
                base = served.urls[0]
                figures.update(await _latencies(base, token, args))
                figures.update(await asyncio.to_thread(_page_loads, base, token, args.screenshots))
            finally:
                await served.stop_async()
    figures["goal_page_load_s"] = LOAD_GOAL_S
    return figures


async def _build_state(url: str, *, nodes: int, jobs: int) -> Any:
    from sqlalchemy import text

    from gangq.queue.bench import synthetic
    from gangq.queue.core import model
    from gangq.queue.core.planner import Planner
    from gangq.queue.store import admission, database, leader, schema, tenants
    from gangq.queue.store import jobs as job_store

    engine = database.create_engine(url)
    try:
        await schema.upgrade(engine)
        sessions = database.session_factory(engine)
        inventory = synthetic.inventory(nodes)
        now = time.time()
        tiers = tuple(tier.name for tier in model.DEFAULT_TIERS)
        pending = synthetic.pending(jobs, rng=random.Random(7), tiers=tiers, now=now - 3600)
        async with sessions() as session, session.begin():
            quotas = synthetic.quotas(nodes)
            for tenant in sorted({quota.tenant for quota in quotas}):
                mine = [quota for quota in quotas if quota.tenant == tenant]
                await tenants.upsert_tenant(session, tenant, mine, actor="bench", now=now)
            for first in range(0, len(pending), 1000):
                await job_store.enqueue(
                    session, pending[first : first + 1000], actor="bench", now=now
                )
        leadership = leader.Leadership(url, holder="bench-ui")
        if not await leadership.try_acquire() or leadership.term is None:
            raise RuntimeError("the scratch database's leadership is taken")
        try:
            await admission.run(
                sessions,
                inventory,
                policy=model.Policy(managed_device_classes=(synthetic.DEVICE_CLASS,)),
                now=time.time(),
                planner=Planner(),
                term=leadership.term,
            )
        finally:
            await leadership.release()
        async with engine.begin() as connection:
            # Planner statistics for the tables just filled, as autovacuum would gather soon.
            await connection.execute(text("ANALYZE"))
        return inventory
    finally:
        await engine.dispose()


async def _latencies(base: str, token: str, args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}

    async def reads(client: httpx.AsyncClient) -> list[float]:
        spent = []
        for index in range(args.requests):
            path = "/v1/jobs?limit=100" if index % 2 else "/v1/queues"
            began = time.perf_counter()
            answer = await client.get(path, headers=headers)
            answer.raise_for_status()
            spent.append((time.perf_counter() - began) * 1000)
        return spent

    async def hold(client: httpx.AsyncClient, opened: asyncio.Event) -> None:
        async with client.stream("GET", "/v1/stream", headers=headers) as answer:
            async for line in answer.aiter_lines():
                if line == "event: ready":
                    opened.set()

    figures: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        await reads(client)  # warm-up: pools, caches, first-time imports
        quiet = await reads(client)
        for path in ("/v1/cluster", "/v1/queues/pending"):
            name = path.removeprefix("/v1/").replace("/", "_")
            for call in ("first", "second"):  # the first compiles the device classes' CEL
                began = time.perf_counter()
                answer = await client.get(path, headers=headers)
                answer.raise_for_status()
                figures[f"{name}_ms_{call}"] = round((time.perf_counter() - began) * 1000)
            figures[f"{name}_kb"] = round(len(answer.content) / 1024)
        opened = [asyncio.Event() for _ in range(args.pages)]
        holders = [asyncio.create_task(hold(client, event)) for event in opened]
        await asyncio.gather(*(event.wait() for event in opened))
        busy = await reads(client)
        for holder in holders:
            holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        after = await reads(client)  # again without pages: tells order effects from streams
    for name, spent in (
        ("no_pages", quiet),
        (f"{args.pages}_pages", busy),
        ("no_pages_after", after),
    ):
        cuts = statistics.quantiles(spent, n=100)
        figures[f"read_p50_ms_{name}"] = round(cuts[49], 1)
        figures[f"read_p99_ms_{name}"] = round(cuts[98], 1)
    return figures


def _page_loads(base: str, token: str, screenshots: Path | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    figures: dict[str, Any] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{base}/ui/")
        page.get_by_label("Bearer token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_selector("main[data-drawn]")
        for name in PAGES:
            page.goto("about:blank")
            began = time.perf_counter()
            page.goto(f"{base}/ui/#/{name}")
            page.wait_for_function(
                "name => document.querySelector('main').dataset.page === name", arg=name
            )
            figures[f"page_load_s_{name}"] = round(time.perf_counter() - began, 3)
            if name == "cluster":
                began = time.perf_counter()
                page.locator("main .tile").nth(1).click()
                page.wait_for_selector("main .open-racks .cell")
                figures["rack_expand_s"] = round(time.perf_counter() - began, 3)
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshots / f"{name}-synthetic.png"), full_page=True)
        browser.close()
    return figures
