"""How late the control loop wakes while 50 clients hammer the REST API (`gangq bench api`).

A timer loop stands for the controller's loop: it sleeps `--interval-ms` and records how late
each wakeup is (a scheduling cycle can start no earlier). Meanwhile a separate process runs
`--clients` HTTP clients against the API for `--seconds`: authenticated and unauthenticated
reads, readiness probes, and PUTs of large quota bodies (`--body-mb`) with and without a
token. Three hostings are measured on a scratch database: `before` (the API's uvicorn on the
control loop and bodies parsed before authentication, as `gangq run` served it before),
`same-loop` (on the control loop, with today's body guard) and `own-thread` (the API on its own
thread and event loop, as `gangq run` serves it now). Prints `cycle_delay_p99_ms` per hosting
(goal: at most 20 ms as served now), the other percentiles and what the clients got.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gangq.queue import eventloop
from gangq.queue.bench import extras

HOSTINGS = ("before", "same-loop", "own-thread")
DELAY_GOAL_MS = 20.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=50, help="concurrent HTTP clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="load per hosting")
    parser.add_argument(
        "--body-mb", type=float, default=5.0, help="size of the large quota bodies sent"
    )
    parser.add_argument("--interval-ms", type=float, default=10.0, help="control loop timer")
    parser.add_argument(
        "--hosting", choices=(*HOSTINGS, "all"), default="all", help="which hosting to measure"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    extras.require("api", "httpx")
    figures = eventloop.run(_measure_all(args))
    if args.json:
        print(json.dumps(figures))
        return 0
    for hosting_name, result in figures["hostings"].items():
        print(f"{hosting_name}:")
        for key, value in result.items():
            print(f"  {key:>22}  {value}")
    return 0


async def _measure_all(args: argparse.Namespace) -> dict[str, Any]:
    from gangq.queue.demo import stack
    from gangq.queue.store import database, schema

    chosen = HOSTINGS if args.hosting == "all" else (args.hosting,)
    figures: dict[str, Any] = {
        "clients": args.clients,
        "seconds": args.seconds,
        "body_mb": args.body_mb,
        "interval_ms": args.interval_ms,
        "goal_cycle_delay_p99_ms": DELAY_GOAL_MS,
        "hostings": {},
    }
    with stack.token_directory() as directory:
        token, token_file = stack.admin_token_file(Path(directory))
        async with stack.scratch_database() as url:
            engine = database.create_engine(url)
            try:
                await schema.upgrade(engine)
            finally:
                await engine.dispose()
            for hosting_name in chosen:
                figures["hostings"][hosting_name] = await _measure(
                    hosting_name, args, url=url, token=token, token_file=token_file
                )
    return figures


async def _measure(
    hosting_name: str, args: argparse.Namespace, *, url: str, token: str, token_file: Path
) -> dict[str, Any]:
    from gangq.api import bodies, hosting
    from gangq.api.app import create_app
    from gangq.api.settings import ApiSettings

    app = create_app(ApiSettings(database_url=url, token_file=token_file))
    if hosting_name == "before":
        guard: Any = bodies.BodyGuard
        app.user_middleware = [m for m in app.user_middleware if m.cls is not guard]
    endpoint = hosting.Endpoint(app, "127.0.0.1", 0)
    async with _served(hosting_name, endpoint) as base_url:
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        load = context.Process(
            target=hammer,
            args=(
                Load(base_url, token, args.clients, args.seconds, int(args.body_mb * 2**20)),
                results,
            ),
            name="gangq-bench-api-load",
        )
        load.start()
        try:
            delays = await _wakeup_delays(load.is_alive, interval_s=args.interval_ms / 1000)
            answers: dict[str, int] = await asyncio.to_thread(results.get, True, 60)
        finally:
            load.join(timeout=60)
    ordered = sorted(delays) or [0.0]

    def percentile(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000, 2)

    requests = sum(answers.values())
    return {
        "cycle_delay_p50_ms": percentile(0.50),
        "cycle_delay_p99_ms": percentile(0.99),
        "cycle_delay_max_ms": round(ordered[-1] * 1000, 2),
        "cycle_delay_mean_ms": round(statistics.fmean(ordered) * 1000, 2),
        "cycles": len(delays),
        "requests": requests,
        "requests_per_s": round(requests / args.seconds, 1),
        "answers": dict(sorted(answers.items())),
    }


class _served:
    """The endpoint on the control loop (`same-loop`) or on its own thread (`own-thread`)."""

    def __init__(self, hosting_name: str, endpoint: Any) -> None:
        self.hosting_name = hosting_name
        self.endpoint = endpoint
        self._stop: Any = None

    async def __aenter__(self) -> str:
        from gangq.api import hosting

        if self.hosting_name == "own-thread":
            host = hosting.ApiHost([self.endpoint], name="gangq-bench-api")
            await host.start_async()
            self._stop = host.stop_async
            return host.urls[0]
        listener = hosting.listen(self.endpoint.host, self.endpoint.port)
        server = hosting.Server(hosting.server_config(self.endpoint.app))
        task = asyncio.create_task(server.serve(sockets=[listener]), name="gangq-bench-api")
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.01)

        async def stop() -> None:
            server.should_exit = True
            await task
            listener.close()

        self._stop = stop
        host, port = listener.getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop()


async def _wakeup_delays(is_loaded: Any, *, interval_s: float) -> list[float]:
    """How late each timer wakeup of this loop is, while the load runs."""
    loop = asyncio.get_running_loop()
    delays: list[float] = []
    while is_loaded():
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        delays.append(max(0.0, loop.time() - due))
    return delays


@dataclass(frozen=True, slots=True)
class Load:
    base_url: str
    token: str
    clients: int
    seconds: float
    body_bytes: int


def hammer(load: Load, results: Any) -> None:
    """The load process: `clients` loops of requests for `seconds`; answers counted by status."""
    results.put(eventloop.run(_hammer(load)))


async def _hammer(load: Load) -> dict[str, int]:
    import httpx

    base_url, clients, seconds = load.base_url, load.clients, load.seconds
    large = b'{"quotas": [' + b" " * load.body_bytes + b"]}"
    admin = {"Authorization": f"Bearer {load.token}"}
    stranger = {"Authorization": "Bearer not-a-token-of-anyone-at-all"}
    json_type = {"Content-Type": "application/json"}
    requests: tuple[tuple[str, str, dict[str, str], bytes | None], ...] = (
        ("GET", "/v1/jobs", admin, None),
        ("GET", "/v1/jobs", {}, None),
        ("GET", "/v1/jobs?tier=%00", admin, None),
        ("GET", "/readyz", {}, None),
        ("GET", "/v1/queues", stranger, None),
        ("PUT", "/v1/tenants/ci", json_type, large),
        ("PUT", "/v1/tenants/ci", admin | json_type, large),
        ("GET", "/v1/tenants", admin, None),
    )
    answers: collections.Counter[str] = collections.Counter()
    # One pool of `clients` connections: building a client per task costs more than the load.
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0, limits=limits) as http:
        deadline = time.monotonic() + seconds

        async def client(index: int) -> None:
            turn = index
            while time.monotonic() < deadline:
                method, path, headers, body = requests[turn % len(requests)]
                turn += 1
                try:
                    response = await http.request(method, path, headers=headers, content=body)
                    answers[str(response.status_code)] += 1
                except httpx.HTTPError as error:
                    answers[type(error).__name__] += 1

        await asyncio.gather(*(client(index) for index in range(clients)))
    return dict(answers)
