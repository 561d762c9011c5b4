"""Issue item 11: `gangq cluster up` serves the reference cluster and writes a kubeconfig."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes_asyncio import client, config

from .conftest import CRD

COMMAND = "from gangq.queue.cli import main; main()"


async def test_cluster_up_serves_kubernetes_asyncio_through_the_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        COMMAND,
        "cluster",
        "up",
        "--kubeconfig",
        str(kubeconfig),
        "--crd",
        str(CRD),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        for _ in range(300):
            if kubeconfig.exists() and kubeconfig.stat().st_size:
                break
            assert process.returncode is None
            await asyncio.sleep(0.05)
        loaded = yaml.safe_load(kubeconfig.read_text())
        assert loaded["current-context"] == "kubesim"
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            nodes = (await client.CoreV1Api(api).list_node()).items
            racks = sorted({node.metadata.labels["gangq.dev/rack"] for node in nodes})
            slices = (await client.ResourceV1Api(api).list_resource_slice()).items
            crds = (await client.ApiextensionsV1Api(api).list_custom_resource_definition()).items
        assert (len(nodes), racks) == (8, ["rack-0", "rack-1"])
        device = slices[0].spec.devices[0]
        assert len(slices) == 8 and len(slices[0].spec.devices) == 8
        assert device.attributes["productName"].string == "NVIDIA H100 80GB HBM3"
        assert {d.attributes["numa"].int for d in slices[0].spec.devices} == {0, 1}
        assert device.capacity["memory"].value == "80Gi"
        assert [crd.metadata.name for crd in crds] == ["trainingjobs.gangq.dev"]
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 0


def test_cluster_up_rejects_bad_arguments_with_a_message() -> None:
    result = subprocess.run(
        [sys.executable, "-c", COMMAND, "cluster", "up", "--nodes", "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and "--nodes must be at least 1" in result.stderr


def test_cluster_up_names_a_broken_crd_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: {}\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            COMMAND,
            "cluster",
            "up",
            "--crd",
            str(broken),
            "--kubeconfig",
            str(tmp_path / "k"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"gangq: error: CRD {broken}: " in result.stderr and "is invalid" in result.stderr


def test_cluster_up_refuses_more_split_nodes_than_nodes() -> None:
    split = ["--nodes", "2", "--partitioned-nodes", "2", "--shared-nodes", "1"]
    result = subprocess.run(
        [sys.executable, "-c", COMMAND, "cluster", "up", *split],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "--partitioned-nodes plus --shared-nodes must not exceed --nodes (2 + 1 > 2)" in (
        result.stderr
    )
