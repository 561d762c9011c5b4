"""What the REST API says during and after a demo run, compared with what the cluster showed.

Owns the HTTP calls of the demo to its own API (aiohttp, bearer token) and the checks built on
them: health, every job listed with the phase its TrainingJob shows, the capacity of each node
equal to the GPUs its ResourceSlices publish, release skew exported as a metric. It must not change
anything through the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import story

TIMEOUT = aiohttp.ClientTimeout(total=10)


class Probe:
    def __init__(self, base_url: str, token: str, *, metrics_url: str = "") -> None:
        self.base_url = base_url
        self.metrics_url = metrics_url
        """Base URL of the metrics port (`/metrics` is not on the REST port)."""
        self._headers = {"Authorization": f"Bearer {token}"}

    async def get(self, path: str, *, base_url: str = "") -> tuple[int, Any]:
        """Status and body (JSON when it parses, else text); status 0 when unreachable."""
        try:
            async with (
                aiohttp.ClientSession(headers=self._headers, timeout=TIMEOUT) as session,
                session.get((base_url or self.base_url) + path) as response,
            ):
                if response.content_type == "application/json":
                    return response.status, await response.json()
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError) as error:
            return 0, str(error)

    async def pending_reason(self, key: str) -> str:
        """A job's queue position and reason as the API tells them, for the timeline."""
        status, body = await self.get(f"/v1/jobs/{key}")
        if status != 200 or not isinstance(body, dict):
            return f"GET /v1/jobs/{key} answered {status}"
        job = body.get("job") or {}
        reason = (job.get("reason") or {}).get("message") or "no reason given"
        return f"API: {key} {job.get('phase')}, position {job.get('queuePosition')}: {reason}"

    async def checks(self, observed: ledger_module.Ledger) -> list[story.Check]:
        return [
            await self._health(),
            await self._jobs(observed),
            await self._capacity(observed),
            await self._metrics(),
        ]

    async def _health(self) -> story.Check:
        status, body = await self.get("/healthz")
        return story.Check("API /healthz", status == 200, f"{status} {body}")

    async def _jobs(self, observed: ledger_module.Ledger) -> story.Check:
        status, body = await self.get("/v1/jobs?limit=1000")
        name = "API /v1/jobs agrees with the TrainingJobs"
        if status != 200 or not isinstance(body, dict):
            return story.Check(name, False, f"answered {status}")
        entries = {f"{i['namespace']}/{i['name']}": i["phase"] for i in body.get("items") or []}
        # A scale-up is queued as a gang of its own, `<job>+<first new replica>`.
        added = {key for key in entries if "+" in key}
        orphans = sorted(key for key in added if key.partition("+")[0] not in observed.jobs)
        listed = {key: phase for key, phase in entries.items() if key not in added}
        shown = {key: record.phase for key, record in observed.jobs.items()}
        differ = sorted(k for k in shown.keys() | listed.keys() if listed.get(k) != shown.get(k))
        differ += [f"{key} (scale-up of no job)" for key in orphans]
        detail = (
            f"{len(listed)} jobs and {len(added)} scale-up gang(s) listed, {len(shown)} observed"
        )
        if differ:
            detail += "; differ: " + ", ".join(
                f"{k} API {listed.get(k)} vs cluster {shown.get(k)}" for k in differ[:5]
            )
        return story.Check(name, bool(listed) and not differ, detail)

    async def _capacity(self, observed: ledger_module.Ledger) -> story.Check:
        """On each node the class counting most must count every GPU the slices publish: a
        GPU published whole and as partitions is one, and it is in two classes (whole GPUs
        and partitions), so the classes' totals are compared node by node, not summed."""
        status, body = await self.get("/v1/capacity")
        name = "API /v1/capacity counts every published device"
        if status != 200 or not isinstance(body, dict):
            return story.Check(name, False, f"answered {status}")
        counted = {
            str(node.get("node")): max(
                (float(c.get("total", 0)) for c in node.get("deviceClasses") or []), default=0.0
            )
            for node in body.get("nodes") or []
        }
        published = observed.counters.gpus_by_node()
        differ = sorted(
            node
            for node in counted.keys() | published.keys()
            if round(counted.get(node, 0.0), 3) != published.get(node, 0)
        )
        classes: list[Mapping[str, Any]] = body.get("deviceClasses") or []
        states = ", ".join(
            f"{c.get('deviceClassName')}: {c.get('reserved')} reserved, {c.get('free')} free"
            for c in classes
        )
        detail = (
            f"{sum(counted.values()):g} counted on {len(counted)} nodes, "
            f"{sum(published.values())} published; {states}"
        )
        if differ:
            detail += "; differ on " + ", ".join(
                f"{node} ({counted.get(node, 0):g} vs {published.get(node, 0)})"
                for node in differ[:5]
            )
        return story.Check(name, bool(published) and not differ, detail)

    async def _metrics(self) -> story.Check:
        status, body = await self.get("/metrics", base_url=self.metrics_url)
        samples = [
            line
            for line in str(body).splitlines()
            if line.startswith("gangq_release_skew_seconds_count")
        ]
        count = sum(float(line.rsplit(" ", 1)[-1]) for line in samples)
        return story.Check(
            "API /metrics exports release skew",
            status == 200 and count > 0,
            f"{status}, gangq_release_skew_seconds_count {count:.0f}",
        )
