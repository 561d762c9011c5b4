"""`gangq run`: the controller, the REST API and /metrics in one process, against a cluster.

Owns the command's flags, connecting to the cluster (kubeconfig or in-cluster) and the
database (which must already be migrated: a schema that is behind stops the start with a hint
to run `gangq migrate`; a database not reachable yet is waited for), and the orderly stop on
SIGINT/SIGTERM. The controller runs on the main event loop; the REST API (`--port`) and
`/metrics` (`--metrics-port`) are served from their own thread and loop
(`gangq.api.hosting`), so no request can delay a scheduling cycle.
Heavy imports load only when the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gangq.queue import eventloop, logconfig
from gangq.queue.cli import kubeclient
from gangq.queue.core.errors import InvalidInputError

STARTUP_RETRY_S = 1.0
STARTUP_TELL_S = 30.0
"""While waiting for a writable database at start, a warning this often (the first at once)."""

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run the controller, REST API and metrics against a Kubernetes cluster"
    )
    parser.add_argument("--config", type=Path, help="YAML settings file ($GANGQ_CONFIG_FILE)")
    parser.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig file (default: in-cluster config, else $KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument("--host", default="0.0.0.0", help="address of the REST API and /metrics")
    parser.add_argument("--port", type=int, default=8080, help="port of the REST API")
    parser.add_argument(
        "--metrics-port", type=int, default=9090, help="port of /metrics (Prometheus)"
    )
    logconfig.add_arguments(parser, level="info")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gangq.queue import config

    logconfig.configure(level=args.log_level, log_format=args.log_format)
    overrides: dict[str, Any] = {}
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.kubeconfig:
        overrides["kubeconfig"] = args.kubeconfig
    settings = config.load(args.config, **overrides)
    if not settings.database_url:
        raise InvalidInputError("no database: set DATABASE_URL or pass --database-url")
    eventloop.run(serve(settings, host=args.host, port=args.port, metrics_port=args.metrics_port))
    return 0


async def serve(
    settings: Any,
    *,
    host: str,
    port: int,
    metrics_port: int = 9090,
    stop: asyncio.Event | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (or `stop`); the schema must be current before anything starts."""
    from gangq.api import hosting, published, scrape
    from gangq.api.app import create_app
    from gangq.api.settings import ApiSettings
    from gangq.queue import controller, metrics
    from gangq.queue.kube import cache
    from gangq.queue.store import database

    stop = stop or asyncio.Event()
    engine = database.create_engine(database.normalize_url(settings.database_url))
    try:
        await until_schema_checked(engine)
        api_client = await kubeclient.api_client(settings.kubeconfig)
        async with api_client:
            cluster = cache.ClusterCache(api_client, settings=settings)
            registry = metrics.create_metrics()
            view = published.PublishedCluster()
            api_settings = ApiSettings(database_url=settings.database_url)
            app = create_app(
                api_settings,
                authenticator=_authenticator(api_settings),
                cluster=view,
                registry=registry,
            )
            api = hosting.ApiHost(
                [
                    hosting.Endpoint(app, host, port),
                    hosting.Endpoint(scrape.create_metrics_app(registry), host, metrics_port),
                ]
            )
            await api.start_async()
            try:
                with _signals(stop):
                    async with asyncio.TaskGroup() as group:
                        group.create_task(
                            controller.run_controller(
                                settings=settings,
                                api_client=api_client,
                                engine=engine,
                                stop=stop,
                                cluster=cluster,
                                metrics=registry,
                            ),
                            name="gangq-controller",
                        )
                        group.create_task(
                            published.follow(cluster, view, stop=stop), name="gangq-publish"
                        )
                        group.create_task(_watch(api, stop), name="gangq-api-watch")
                        await stop.wait()
            finally:
                await api.stop_async()
    finally:
        await engine.dispose()


async def until_schema_checked(engine: Any) -> None:
    """Check the schema once a writable server answers. A replica (re)started while the
    primary is down or a standby is being promoted waits for it, as it would for the API
    server, instead of exiting: a restart loop would add the kubelet's back-off to the
    outage. A schema behind, or any other refusal, still ends the start."""
    from gangq.queue.store import database, schema

    waited_s, told_s = 0.0, -math.inf
    while True:
        try:
            await schema.ensure_current(engine)
            return
        except Exception as error:
            if not database.is_connection_failure(error):
                raise
            if waited_s - told_s >= STARTUP_TELL_S:
                logger.warning(
                    "no writable PostgreSQL yet (%s); waiting (%.0fs so far)", error, waited_s
                )
                told_s = waited_s
        await asyncio.sleep(STARTUP_RETRY_S)
        waited_s += STARTUP_RETRY_S


async def _watch(api: Any, stop: asyncio.Event) -> None:
    """The API's thread ending on its own stops the process (its error is raised here)."""
    while not stop.is_set():
        api.check()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


def _authenticator(api_settings: Any) -> Any:
    """The token file is read before anything starts, so a bad one is a clear error, not a
    failed API startup inside a running controller."""
    from gangq.api import auth
    from gangq.api.settings import AuthMode

    if api_settings.auth_mode is not AuthMode.TOKEN_FILE:
        return None
    if api_settings.token_file is None:
        raise InvalidInputError(
            "GANGQ_TOKEN_FILE is not set: give a token file, or use GANGQ_AUTH_MODE=tokenreview"
        )
    return auth.TokenFileAuthenticator.from_path(api_settings.token_file)


@contextlib.contextmanager
def _signals(stop: asyncio.Event) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
