"""Issue item 11: `gangq cluster up` serves the reference cluster and writes a kubeconfig."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

from .conftest import CRD

COMMAND = "from gangq.queue.cli import main; main()"


@contextlib.asynccontextmanager
async def _serving(tmp_path: Path, *arguments: str) -> AsyncIterator[client.ApiClient]:
    """`gangq cluster up` in a subprocess, reached through the kubeconfig it writes; it must
    stop cleanly on SIGINT."""
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        COMMAND,
        "cluster",
        "up",
        "--kubeconfig",
        str(kubeconfig),
        *arguments,
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
            yield api
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 0


async def test_cluster_up_serves_kubernetes_asyncio_through_the_kubeconfig(tmp_path: Path) -> None:
    async with _serving(tmp_path, "--crd", str(CRD)) as api:
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


async def test_cluster_up_publishes_partitioned_and_shared_gpus(tmp_path: Path) -> None:
    split = ("--nodes", "3", "--partitioned-nodes", "1", "--shared-nodes", "1")
    async with _serving(tmp_path, *split) as api:
        resource = client.ResourceV1Api(api)
        slices = (await resource.list_resource_slice()).items
        classes = (await resource.list_device_class()).items
    pools: dict[str, list[Any]] = {}
    for found in slices:
        pools.setdefault(found.spec.pool.name, []).append(found)
    assert [len(pools[n]) for n in ("gpu-0", "gpu-1", "gpu-2")] == [1, 3, 1]
    partitions = [d for s in pools["gpu-1"] for d in s.spec.devices or []]
    profiles = [d.attributes["profile"].string for d in partitions if "profile" in d.attributes]
    assert {p: profiles.count(p) for p in set(profiles)} == {
        "1g.10gb": 7 * 8,
        "2g.20gb": 3 * 8,
        "3g.40gb": 2 * 8,
        "4g.40gb": 8,
    }
    assert all(d.allow_multiple_allocations for d in pools["gpu-2"][0].spec.devices)
    assert sorted(c.metadata.name for c in classes) == [
        "gpu.nvidia.com",
        "partition.gpu.nvidia.com",
        "shared.gpu.nvidia.com",
    ]


async def test_cluster_up_podgroups_serves_the_gang_scheduling_api(tmp_path: Path) -> None:
    async with _serving(tmp_path, "--nodes", "2", "--podgroups") as api:
        groups = (await client.ApisApi(api).get_api_versions()).groups
        created = await client.CustomObjectsApi(api).create_namespaced_custom_object(
            "scheduling.k8s.io",
            "v1alpha2",
            "default",
            "podgroups",
            {
                "apiVersion": "scheduling.k8s.io/v1alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "g"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
        )
    served = {group.name: [v.version for v in group.versions] for group in groups}
    assert served["scheduling.k8s.io"] == ["v1alpha2"]
    assert created["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]


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


def test_cluster_up_refuses_a_controller_kubeconfig_without_a_token(tmp_path: Path) -> None:
    # Without a token no permission is checked: the ServiceAccount's kubeconfig would be admin.
    controller = ["--controller-kubeconfig", str(tmp_path / "controller.kubeconfig")]
    result = subprocess.run(
        [sys.executable, "-c", COMMAND, "cluster", "up", *controller],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "--controller-kubeconfig needs --token" in result.stderr
