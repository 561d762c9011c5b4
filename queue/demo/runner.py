"""One demo run: start the embedded parts, play the scenario, observe, judge, tear down.

Owns the order of things: scratch database and migrations, the emulator with the scenario's
cluster (its split-GPU nodes tainted) and the CRD, namespaces and tenants, the observers
(watches on slices, claims, pods and TrainingJobs), the controller (as gangq's ServiceAccount
with the RBAC of deploy/), the REST API, then the steps on their triggers until the story is
over or the time is up. It must not judge the run itself (`story.py`, `probe.py` do).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gangq.api import published
from gangq.api.app import create_app
from gangq.api.settings import ApiSettings, AuthMode
from gangq.queue import config, controller
from gangq.queue import metrics as gangq_metrics
from gangq.queue.core.errors import GangqError
from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import player, probe, report, serviceaccount, stack, story, watcher
from gangq.queue.demo import scenario as scenario_module
from gangq.queue.kube import cache
from gangq.queue.kubesim import cluster
from gangq.queue.kubesim.emulator import Emulator
from gangq.queue.store import database, schema, tenants

logger = logging.getLogger(__name__)

READY_SECONDS = 0.5
"""How long a released pod takes to become Running in the emulated cluster."""
STOP_SECONDS = 10.0


def default_crd() -> Path:
    """crds/trainingjob.yaml, shipped as package data of this package (next to this module)."""
    return Path(__file__).parent / "crds" / "trainingjob.yaml"


@dataclass(frozen=True, slots=True)
class Options:
    directory: Path
    echo: Callable[[str], None]
    serve: bool = False
    api_port: int = 0
    crd: Path | None = None
    podgroups: bool = False
    """Play on a cluster that serves PodGroups (Kubernetes 1.36 with gang scheduling on)."""


@dataclass(eq=False)
class Clock:
    started: float

    def __call__(self) -> float:
        return time.monotonic() - self.started


async def run(options: Options, *, on_outcome: Callable[[report.Outcome], None]) -> report.Outcome:
    """Play the scenario once; `on_outcome` is told the result before `--serve` waits."""
    clock = Clock(time.monotonic())
    _stop_on_sigterm()
    scenario = scenario_module.load(options.directory)
    crd = options.crd or default_crd()
    if not crd.is_file():
        raise GangqError(f"CRD file {crd} not found")
    settings = config.load(**scenario.controller, tenants=())
    progress = report.Progress(options.echo)
    async with contextlib.AsyncExitStack() as exits:
        parts = await _start(
            exits,
            scenario,
            settings,
            crd=crd,
            clock=clock,
            progress=progress,
            api_port=options.api_port,
            podgroups=options.podgroups,
        )
        outcome = await _play(parts, scenario, settings, clock=clock, progress=progress)
        on_outcome(outcome)
        if options.serve:
            options.echo(
                f"\nREST API serving at {parts.api.base_url} (Ctrl-C to stop)\n"
                f"web UI: {parts.api.base_url}/ui/ (sign in with the token below)\n"
                f"token: {parts.token}\n"
                + "".join(
                    f"viewer token of tenant {tenant}: {token}\n"
                    for tenant, token in parts.viewers.items()
                )
                + "try:\n"
                f"  curl -H 'Authorization: Bearer {parts.token}' {parts.api.base_url}/v1/jobs\n"
                f"  kubectl --kubeconfig {parts.kubeconfig} get trainingjobs -A\n"
                f"metrics at {parts.api.metrics_url}/metrics"
            )
            await _serve_until_interrupted(parts.api)
    return outcome


@dataclass(eq=False)
class _Parts:
    api_client: client.ApiClient
    observed: ledger_module.Ledger
    controller: _Controller
    api: stack.ServedApi
    token: str
    viewers: dict[str, str]
    """tenant -> a viewer token of that tenant"""
    kubeconfig: Path
    """of the emulated cluster, to submit more jobs while the API is served"""


async def _start(
    exits: contextlib.AsyncExitStack,
    scenario: scenario_module.Scenario,
    settings: config.ControllerSettings,
    *,
    crd: Path,
    clock: Clock,
    progress: report.Progress,
    api_port: int,
    podgroups: bool,
) -> _Parts:
    """Everything up, in dependency order; `exits` tears it down in reverse."""

    def say(text: str) -> None:
        progress.add(clock(), text)
        progress.flush()

    say("starting PostgreSQL (DATABASE_URL, else the embedded server)")
    url = await exits.enter_async_context(stack.scratch_database())
    engine = database.create_engine(url)
    exits.push_async_callback(engine.dispose)
    say(f"database ready at schema {await schema.upgrade(engine)}")
    inventory = scenario.cluster.inventory()
    emulator = await exits.enter_async_context(
        Emulator(inventory=inventory, crds=(crd,), ready_seconds=READY_SECONDS, podgroups=podgroups)
    )
    groups = ", PodGroups served" if podgroups else ""
    say(f"cluster emulator at {emulator.base_url}: {_shape(inventory)}{groups}")
    api_client = await exits.enter_async_context(client.ApiClient(emulator.configuration()))
    await _taint_split_nodes(api_client, inventory, scenario.cluster.split_node_taint)
    await _create_namespaces(api_client, scenario)
    await _set_tenants(engine, scenario)
    say(f"namespaces and tenants: {', '.join(t.name for t in scenario.tenants)}")
    observed = ledger_module.Ledger(
        settings.identity_attributes,
        echo=progress.add,
        domains=await _domains(api_client, settings.topology_keys),
    )
    await _observe(exits, api_client, observed, clock)
    # The controller is gangq's ServiceAccount with the RBAC deploy/ ships, as in a cluster.
    controller_client = await exits.enter_async_context(
        client.ApiClient(emulator.configuration(serviceaccount.controller_token(emulator)))
    )
    running = await _start_controller(exits, settings, controller_client, engine)
    directory = Path(exits.enter_context(stack.token_directory()))
    token, token_file = stack.admin_token_file(directory)
    viewers = stack.add_viewer_tokens(token_file, [t.name for t in scenario.tenants])
    kubeconfig = directory / "kubesim.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(emulator.kubeconfig(), sort_keys=False))
    app = create_app(
        ApiSettings(database_url=url, auth_mode=AuthMode.TOKEN_FILE, token_file=token_file),
        cluster=running.view,
        registry=running.metrics,
    )
    served = await exits.enter_async_context(stack.api_server(app, port=api_port))
    say(f"controller started; REST API at {served.base_url}")
    return _Parts(api_client, observed, running, served, token, viewers, kubeconfig)


async def _play(
    parts: _Parts,
    scenario: scenario_module.Scenario,
    settings: config.ControllerSettings,
    *,
    clock: Clock,
    progress: report.Progress,
) -> report.Outcome:
    observed = parts.observed
    api_probe = probe.Probe(parts.api.base_url, parts.token, metrics_url=parts.api.metrics_url)
    long_running = frozenset(tier.name for tier in settings.tiers if tier.long_running)
    playback = player.Player(
        scenario,
        parts.api_client,
        observed,
        clock=clock,
        probe=api_probe,
        long_running=long_running,
        on_poll=progress.flush,
    )
    timed_out = await playback.play(deadline=scenario.timeout_s, alive=parts.controller.check)
    observed.finish(at=clock())
    progress.flush()
    observed.echo = None
    checks = (
        *story.invariants(observed),
        *story.expectations(observed, scenario.story, long_running=long_running),
        *await api_probe.checks(observed),
    )
    return report.Outcome(observed, checks, clock(), timed_out)


async def _serve_until_interrupted(served: stack.ServedApi) -> None:
    """Ctrl-C ends serving, not the run: the exit code still tells whether the story held."""
    try:
        await served.wait()
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is None or current.uncancel() > 0:
            raise


def _stop_on_sigterm() -> None:
    """SIGTERM cancels the run like Ctrl-C does, so the scratch database is still dropped."""
    task = asyncio.current_task()
    if task is None:
        return
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)


def _shape(inventory: cluster.Inventory) -> str:
    split = [
        f"{count} {kind}"
        for count, kind in (
            (inventory.partitioned_nodes, "partitioned"),
            (inventory.shared_nodes, "shared"),
        )
        if count
    ]
    return (
        f"{inventory.nodes} nodes x {inventory.gpus_per_node} GPUs "
        f"({inventory.product_name}) in {inventory.racks} racks"
        + (f", of which {' and '.join(split)}" if split else "")
    )


async def _taint_split_nodes(
    api_client: client.ApiClient,
    inventory: cluster.Inventory,
    taint: scenario_module.TaintConfig | None,
) -> None:
    """What an administrator does to keep whole-GPU work off the nodes meant for slices."""
    if taint is None:
        return
    core = client.CoreV1Api(api_client)
    body = [{"op": "add", "path": "/spec/taints", "value": [taint.model_dump()]}]
    for index in range(inventory.nodes):
        if inventory.layout(index) != cluster.WHOLE:
            await core.patch_node(inventory.node_name(index), body)


async def _create_namespaces(
    api_client: client.ApiClient, scenario: scenario_module.Scenario
) -> None:
    core = client.CoreV1Api(api_client)
    for namespace in scenario.namespaces:
        metadata = namespace["metadata"]
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=metadata["name"], labels=metadata.get("labels"))
        )
        try:
            await core.create_namespace(body)
        except ApiException as error:
            if error.status != 409:
                raise GangqError(
                    f"creating namespace {namespace['metadata']['name']}: {error.reason}"
                ) from error


async def _domains(api_client: client.ApiClient, keys: tuple[str, ...]) -> dict[str, str]:
    """Node -> the value of its first topology label (its rack in the reference cluster)."""
    nodes = await client.CoreV1Api(api_client).list_node()
    found = {}
    for node in nodes.items:
        labels = node.metadata.labels or {}
        value = next((labels[key] for key in keys if key in labels), None)
        if value is not None:
            found[str(node.metadata.name)] = str(value)
    return found


async def _set_tenants(engine: Any, scenario: scenario_module.Scenario) -> None:
    sessions = database.session_factory(engine)
    async with sessions() as session, session.begin():
        for tenant in scenario.tenants:
            await tenants.upsert_tenant(
                session, tenant.name, tenant.to_core(), actor="demo", now=time.time()
            )


async def _observe(
    exits: contextlib.AsyncExitStack,
    api_client: client.ApiClient,
    observed: ledger_module.Ledger,
    clock: Clock,
) -> None:
    """Start the watches and wait until each has listed (slices first: identities)."""
    core = client.CoreV1Api(api_client)
    resource = client.ResourceV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    sources = (
        (ledger_module.SLICES, resource.list_resource_slice),
        (ledger_module.CLAIMS, resource.list_resource_claim_for_all_namespaces),
        (ledger_module.PODS, core.list_pod_for_all_namespaces),
        (
            ledger_module.TRAINING_JOBS,
            functools.partial(
                custom.list_cluster_custom_object, player.GROUP, player.VERSION, player.PLURAL
            ),
        ),
    )

    def listener(kind: str, kind_of_event: str, obj: dict[str, Any]) -> None:
        observed.on_event(kind, kind_of_event, obj, at=clock())

    for kind, call in sources:
        observer = watcher.Watcher(kind, call, listener)
        task = asyncio.create_task(observer.run(), name=f"gangq-demo-watch-{kind}")
        exits.push_async_callback(_cancel, task)
        try:
            await asyncio.wait_for(observer.synced.wait(), timeout=STOP_SECONDS)
        except TimeoutError as error:
            raise GangqError(f"could not list {kind} within {STOP_SECONDS:.0f}s") from error


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass(eq=False)
class _Controller:
    task: asyncio.Task[None]
    cluster: cache.ClusterCache
    view: published.PublishedCluster
    """What the controller publishes for the API's thread."""
    metrics: gangq_metrics.Metrics

    def check(self) -> None:
        """Raise when the controller stopped on its own: the story cannot go on."""
        if self.task.done():
            error = None if self.task.cancelled() else self.task.exception()
            raise GangqError(f"the controller stopped during the demo: {error!r}")


async def _start_controller(
    exits: contextlib.AsyncExitStack,
    settings: config.ControllerSettings,
    api_client: client.ApiClient,
    engine: Any,
) -> _Controller:
    stop = asyncio.Event()
    cluster = cache.ClusterCache(api_client, settings=settings)
    metrics = gangq_metrics.create_metrics()
    task = asyncio.create_task(
        controller.run_controller(
            settings=settings,
            api_client=api_client,
            engine=engine,
            stop=stop,
            cluster=cluster,
            metrics=metrics,
        ),
        name="gangq-demo-controller",
    )
    view = published.PublishedCluster()
    follower = asyncio.create_task(
        published.follow(cluster, view, stop=stop), name="gangq-demo-publish"
    )

    async def halt() -> None:
        stop.set()
        await follower
        done, _ = await asyncio.wait({task}, timeout=STOP_SECONDS)
        if not done:
            await _cancel(task)
        elif not task.cancelled() and task.exception() is not None:
            logger.error("the controller ended with %r", task.exception())

    exits.push_async_callback(halt)
    return _Controller(task, cluster, view, metrics)
