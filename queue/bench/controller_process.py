"""The controller alone in its own process, for the end-to-end bench's CPU figure.

Owns running `controller.run_controller` against a kubeconfig and a migrated database until
SIGINT, and printing the CPU seconds this process spent after its imports as JSON lines: once
it is ready (every cache synced and a first step run to its end as leader), and at the end.
The bench submits only after the first and counts per job what lies between the two, so the
one-off start (lists of every node and slice, matching every device against its classes for
the first gauges, the first step) is reported apart.
The bench's submitting client and the emulator run in other processes, so these figures are
the controller's own. It must not create any workload.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import signal
import sys
import time

from kubernetes_asyncio import client, config

from gangq.queue import config as gangq_config
from gangq.queue import controller, eventloop
from gangq.queue import metrics as gangq_metrics
from gangq.queue.store import database

RUN = "from gangq.queue.bench.controller_process import main; main()"
READY_POLL_SECONDS = 0.05


def _cycles(metrics: gangq_metrics.Metrics) -> float:
    """Scheduling cycles run so far (the count of their duration histogram)."""
    for family in metrics.scheduling_cycle_seconds.collect():
        for sample in family.samples:
            if sample.name.endswith("_count"):
                return sample.value
    return 0.0


async def _report_ready(metrics: gangq_metrics.Metrics, started: float) -> None:
    # Steps show only in the metrics the controller feeds, which have no event; a step's cycle
    # comes first in it, so the first step has ended once a second cycle is counted.
    while _cycles(metrics) < 2:  # noqa: ASYNC110
        await asyncio.sleep(READY_POLL_SECONDS)
    print(json.dumps({"ready_cpu_s": round(time.process_time() - started, 3)}), flush=True)


async def _run(args: argparse.Namespace, started: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    settings = gangq_config.load(cycle_interval_s=args.cycle_interval, tenants=())
    configuration = client.Configuration()
    await config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    engine = database.create_engine(args.database_url)
    metrics = gangq_metrics.create_metrics()
    ready = asyncio.create_task(_report_ready(metrics, started))
    try:
        async with client.ApiClient(configuration) as api_client:
            print("controller started", flush=True)
            await controller.run_controller(
                settings=settings, api_client=api_client, engine=engine, stop=stop, metrics=metrics
            )
    finally:
        ready.cancel()
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--cycle-interval", type=float, default=0.1)
    parser.add_argument("--profile", help="write cProfile statistics of the run to this file")
    args = parser.parse_args()
    started = time.process_time()
    if args.profile:
        with cProfile.Profile(time.process_time) as profile:
            eventloop.run(_run(args, started))
        profile.dump_stats(args.profile)
    else:
        eventloop.run(_run(args, started))
    print(json.dumps({"cpu_s": round(time.process_time() - started, 3)}), flush=True)
    sys.exit(0)
