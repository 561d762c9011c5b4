"""The CPU one request costs the controller's own client on this machine, for `gangq bench e2e`.

Owns one short load through `kube.client.Kube` (the path every controller request takes):
merge patches of one ConfigMap, as many in flight as the controller sends, timed by this
process's CPU clock. `controller_cpu_ms_per_job` divided by this figure is the controller's
CPU per job in requests, which compares across machines of different speed where milliseconds
do not. It must not run while anything else in this process is busy.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes_asyncio import client

from gangq.queue.kube import resources
from gangq.queue.kube.client import Kube

CONFIG_MAPS = resources.Resource("", "v1", "configmaps", "ConfigMap")
NAME = "gangq-bench-request-cost"
WARM_UP = 50


async def cpu_us_per_request(configuration: Any, *, namespace: str, requests: int) -> float:
    """Microseconds of this process's CPU per patch, averaged over `requests` of them."""
    async with client.ApiClient(configuration) as api_client:
        kube = Kube(api_client)
        try:
            body = {"metadata": {"name": NAME}, "data": {"n": "0"}}
            await kube.create(CONFIG_MAPS, namespace, body)

            async def patch(index: int) -> None:
                # Kube keeps at most REQUESTS_IN_FLIGHT of them in flight, as for the controller.
                await kube.patch(CONFIG_MAPS, namespace, NAME, {"data": {"n": str(index)}})

            await asyncio.gather(*(patch(i) for i in range(WARM_UP)))
            started = time.process_time()
            await asyncio.gather(*(patch(i) for i in range(requests)))
            spent = time.process_time() - started
            await kube.delete(CONFIG_MAPS, namespace, NAME)
        finally:
            await kube.close()
    return spent * 1e6 / max(requests, 1)
