"""The emulated cluster in its own process, as a real API server would be (`gangq cluster up`).

Owns starting it, waiting until it serves, the client configuration from its kubeconfig, the
kubeconfig of gangq's ServiceAccount (the RBAC deploy/ ships, applied in the emulator's process
through `demo.serviceaccount`), and stopping it. A separate process keeps the emulator's work
off the controller's event loop, so the end-to-end figures measure the controller rather than
the two sharing one CPU core. It must not create any workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from gangq.queue.core.errors import GangqError

RUN_CLI = "from gangq.queue.cli import main; main()"
START_SECONDS = 60.0
STOP_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Served:
    configuration: Any
    """kubernetes-asyncio's client configuration for the cluster."""
    controller_kubeconfig: Path
    """gangq's ServiceAccount as a file, for the controller's process: a write the RBAC of
    deploy/ lacks is refused. `configuration` is the admin's, for the bench's own clients,
    which play users."""
    pid: int
    """The emulator's process, whose CPU time the bench reads."""


@contextlib.asynccontextmanager
async def served_cluster(
    *, nodes: int, racks: int, crd: Path, ready_seconds: float, podgroups: bool = False
) -> AsyncIterator[Served]:
    """The client configuration of a cluster serving until the context ends; `podgroups`
    serves PodGroups as Kubernetes 1.36 with the GangScheduling gates does."""
    with tempfile.TemporaryDirectory(prefix="gangq-bench-") as directory:
        kubeconfig = Path(directory) / "kubeconfig"
        controller_kubeconfig = Path(directory) / "controller.kubeconfig"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            RUN_CLI,
            "cluster",
            "up",
            f"--nodes={nodes}",
            f"--racks={racks}",
            f"--crd={crd}",
            f"--ready-seconds={ready_seconds:g}",
            f"--kubeconfig={kubeconfig}",
            # Without a token the emulator checks no permissions: the controller would be admin.
            f"--token={secrets.token_hex(16)}",
            f"--controller-kubeconfig={controller_kubeconfig}",
            *(["--podgroups"] if podgroups else []),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            await _started(process)
            configuration = client.Configuration()
            await config.load_kube_config(
                config_file=str(kubeconfig), client_configuration=configuration
            )
            yield Served(configuration, controller_kubeconfig, process.pid)
        finally:
            await _stop(process)


async def _started(process: asyncio.subprocess.Process) -> None:
    """Wait for its first line ("kubesim serving ..."): both kubeconfigs are written by then."""
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=START_SECONDS)
    except TimeoutError as error:
        raise GangqError(
            f"the cluster emulator did not start within {START_SECONDS:.0f}s"
        ) from error
    if not line.startswith(b"kubesim serving"):
        raise GangqError(f"the cluster emulator did not start: {line.decode(errors='replace')!r}")


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(process.wait(), timeout=STOP_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
