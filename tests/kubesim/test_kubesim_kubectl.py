"""kubectl against the emulator: `apply` with validation on (it reads OpenAPI v3 to learn that
the server validates fields itself) and `get` tables with the real server's columns."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from gangq.queue.kubesim.emulator import Emulator
from tests.kubesim.conftest import CRD, SMALL

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "reference"


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[tuple[Emulator, Path]]:
    """An emulator without a token (kubectl sends none over plain HTTP) and its kubeconfig."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    async with Emulator(inventory=SMALL, crds=(CRD,), token=None, ready_seconds=0.0) as cluster:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(cluster.kubeconfig()))
        yield cluster, config


async def run(config: Path, *args: str, stdin: str | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(config),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        process.communicate(None if stdin is None else stdin.encode()), timeout=60
    )
    assert process.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    assert "warning" not in err.decode().lower(), err.decode()
    return out.decode()


def header(output: str) -> list[str]:
    return output.splitlines()[0].split()


async def test_apply_validates_creates_and_patches_without_validate_false(
    kubectl: tuple[Emulator, Path],
) -> None:
    _, config = kubectl
    created = await run(config, "apply", "-f", str(EXAMPLES / "namespaces.yaml"))
    assert "namespace/ml-train created" in created
    job = (EXAMPLES / "train-llm.yaml").read_text()
    assert "created" in await run(config, "apply", "-f", "-", stdin=job)
    changed = job.replace("maxRestarts: 3", "maxRestarts: 2")
    assert "configured" in await run(config, "apply", "-f", "-", stdin=changed)
    read = json.loads(
        await run(config, "get", "trainingjob", "train-llm", "-n", "ml-train", "-o", "json")
    )
    assert read["spec"]["maxRestarts"] == 2
    unknown = changed.replace("maxRestarts: 2", "maxRestarts: 2\n  bogus: 1")
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(config), "apply", "-f", "-",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(unknown.encode()), timeout=60)
    assert process.returncode != 0 and 'unknown field "spec.bogus"' in err.decode()


async def test_get_prints_the_real_servers_columns(kubectl: tuple[Emulator, Path]) -> None:
    _, config = kubectl
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }
    await run(config, "apply", "-f", "-", stdin=json.dumps(pod))
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
    }
    await run(config, "apply", "-f", "-", stdin=json.dumps(claim))
    assert header(await run(config, "get", "pods", "-o", "wide")) == [
        "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
        "READINESS", "GATES",
    ]  # fmt: skip
    assert header(await run(config, "get", "nodes")) == [
        "NAME", "STATUS", "ROLES", "AGE", "VERSION",
    ]  # fmt: skip
    nodes = (await run(config, "get", "nodes")).splitlines()[1].split()
    assert nodes[1:3] == ["Ready", "<none>"] and nodes[4].startswith("v1.")
    assert header(await run(config, "get", "namespaces")) == ["NAME", "STATUS", "AGE"]
    claims = await run(config, "get", "resourceclaims")
    assert header(claims) == ["NAME", "STATE", "AGE"]
    assert claims.splitlines()[1].split()[:2] == ["c", "pending"]
    await run(config, "apply", "-f", str(EXAMPLES / "namespaces.yaml"))
    await run(config, "apply", "-f", str(EXAMPLES / "train-llm.yaml"))
    jobs = await run(config, "get", "trainingjobs", "-A", "-o", "wide")
    printer = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["additionalPrinterColumns"]
    assert " ".join(header(jobs)) == " ".join(
        ["NAMESPACE", "NAME", *(c["name"].upper() for c in printer)]
    )
    assert jobs.splitlines()[1].split()[:3] == ["ml-train", "train-llm", "training"]
