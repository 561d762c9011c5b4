"""Scale figures of the embedded cluster emulator: memory and request latency with many nodes,
pods and concurrent watchers.

Run: `python tests/bench/kubesim_scale.py [--nodes 2000] [--pods 20000] [--watchers 5] [--json]`.
Prints the resident memory after seeding and after creating the pods, events delivered to the
watchers, and p50/p95/p99/max latency of create, get, list (limit 500), merge patch and the full
cluster-wide pod list. Pods are created gated so the figures measure the API server, not the
simulated kubelets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.emulator import Emulator

PODS = "/api/v1/namespaces/default/pods"


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _pod(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p-{index:05d}",
            "labels": {"app": "bench", "shard": str(index % 10)},
        },
        "spec": {
            "schedulingGates": [{"name": "gangq.dev/admission"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/x:1",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {
        "n": len(ordered),
        "p50_ms": round(pick(0.50), 2),
        "p95_ms": round(pick(0.95), 2),
        "p99_ms": round(pick(0.99), 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


async def _timed(samples: list[float], call: Callable[[], Awaitable[None]]) -> None:
    started = time.perf_counter()
    await call()
    samples.append(time.perf_counter() - started)


async def _watch(
    session: aiohttp.ClientSession, base: str, counter: list[int], ready: asyncio.Event
) -> None:
    params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
    async with session.get(base + "/api/v1/pods", params=params) as response:
        ready.set()
        async for line in response.content:
            if line.strip():
                counter[0] += 1


async def _request(session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> None:
    async with session.request(method, url, **kwargs) as response:
        await response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {url}: {response.status}")


async def measure(nodes: int, pods: int, watchers: int, concurrency: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"nodes": nodes, "pods": pods, "watchers": watchers}
    figures["rss_start_mib"] = round(_rss_mib(), 1)
    started = time.perf_counter()
    inventory = Inventory(nodes=nodes, gpus_per_node=8, racks=max(1, nodes // 32))
    async with Emulator(inventory=inventory, history_size=50_000) as cluster:
        figures["seed_seconds"] = round(time.perf_counter() - started, 2)
        figures["rss_after_seed_mib"] = round(_rss_mib(), 1)
        headers = {"Authorization": f"Bearer {cluster.token}"}
        connector = aiohttp.TCPConnector(limit=concurrency + watchers + 4)
        async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
            base = cluster.base_url
            counters = [[0] for _ in range(watchers)]
            readies = [asyncio.Event() for _ in range(watchers)]
            watching = [
                asyncio.create_task(_watch(session, base, c, r))
                for c, r in zip(counters, readies, strict=True)
            ]
            await asyncio.gather(*(ready.wait() for ready in readies))
            samples: dict[str, list[float]] = {
                "create": [],
                "get": [],
                "list_limit_500": [],
                "patch": [],
            }
            queue = iter(range(pods))

            async def worker() -> None:
                for index in queue:
                    await _timed(
                        samples["create"],
                        lambda i=index: _request(session, "POST", base + PODS, json=_pod(i)),
                    )

            created = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            figures["create_seconds"] = round(time.perf_counter() - created, 2)
            figures["rss_after_pods_mib"] = round(_rss_mib(), 1)
            for index in range(0, pods, max(1, pods // 500)):
                name = f"p-{index:05d}"
                await _timed(
                    samples["get"], lambda n=name: _request(session, "GET", f"{base}{PODS}/{n}")
                )
                patch = {"metadata": {"labels": {"touched": "yes"}}}
                await _timed(
                    samples["patch"],
                    lambda n=name, p=patch: _request(
                        session,
                        "PATCH",
                        f"{base}{PODS}/{n}",
                        data=json.dumps(p),
                        headers={"Content-Type": "application/merge-patch+json"},
                    ),
                )
            for shard in range(50):
                params = {"limit": "500", "labelSelector": f"shard={shard % 10}"}
                await _timed(
                    samples["list_limit_500"],
                    lambda q=params: _request(session, "GET", base + PODS, params=q),
                )
            full: list[float] = []
            for _ in range(3):
                await _timed(full, lambda: _request(session, "GET", base + "/api/v1/pods"))
            samples["list_all_pods"] = full
            await asyncio.sleep(0.5)
            figures["watch_events_per_watcher"] = [c[0] for c in counters]
            figures["latency"] = {name: _summary(values) for name, values in samples.items()}
            cluster.drop_watches()
            await asyncio.gather(*watching, return_exceptions=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--watchers", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.nodes, args.pods, args.watchers, args.concurrency))
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        if key != "latency":
            print(f"{key:28} {value}")
    for name, summary in figures["latency"].items():
        print(f"{name:28} " + "  ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
