"""The emulator's own write throughput at saturation, for `gangq bench e2e`.

Owns one short load: many concurrent raw HTTP clients, each repeating a gang replica's writes
(create a claim, write its allocation, create a gated pod, delete both), counted as the
emulator answers them. Gated pods keep the simulated scheduler and kubelets out of it, so the
figure is the API server's. On a machine shared with other work the emulator may not get a
whole core, so the bench also divides by the CPU time the emulator spent: writes per CPU
second is what one core sustains. It must not run anything but this load.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

CLIENTS = 48


def _claim(name: str) -> dict[str, Any]:
    request = {"name": "devices", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def _allocation(node: str) -> dict[str, Any]:
    result = {"request": "devices", "driver": "gpu.nvidia.com", "pool": node, "device": "gpu-0"}
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [term]},
                "allocationTimestamp": "2026-01-01T00:00:00Z",
            }
        }
    }


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulingGates": [{"name": "bench"}],
            "containers": [{"name": "work", "image": "busybox:1.36", "resources": {}}],
            "resourceClaims": [{"name": "devices", "resourceClaimName": name}],
        },
    }


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far; None where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Saturation:
    writes: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.writes / self.seconds


async def saturate(configuration: Any, *, namespace: str, seconds: float) -> Saturation:
    """Writes the emulator completed while `CLIENTS` clients kept it busy, and over how long."""
    base = f"{configuration.host}/api/v1/namespaces/{namespace}"
    claims = f"{configuration.host}/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    token = {"Authorization": (await configuration.get_api_key_with_prefix("BearerToken")) or ""}
    headers = {**token, "Content-Type": "application/json"}
    merge = {**token, "Content-Type": "application/merge-patch+json"}
    names = itertools.count()
    done = 0
    deadline = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            name = f"saturation-{next(names)}"
            steps = (
                ("POST", claims, _claim(name), headers),
                ("PATCH", f"{claims}/{name}/status", _allocation("node-000"), merge),
                ("POST", f"{base}/pods", _pod(name), headers),
                ("DELETE", f"{base}/pods/{name}?gracePeriodSeconds=0", None, headers),
                ("DELETE", f"{claims}/{name}", None, headers),
            )
            for method, url, body, sent in steps:
                data = None if body is None else json.dumps(body)
                async with session.request(method, url, data=data, headers=sent) as response:
                    await response.read()
                    if response.status < 300:
                        done += 1

    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session) for _ in range(CLIENTS)))
        return Saturation(done, time.monotonic() - started)
