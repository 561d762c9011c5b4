"""The ValidatingAdmissionPolicies of deploy/: CEL that compiles, and decisions on real requests.

Each policy is evaluated as the API server does: match conditions first, then the variables in
order, then every validation; a validation that is false denies with its message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

POLICY_FILE = Path(__file__).resolve().parents[2] / "deploy" / "base" / "admission-policy.yaml"
GANGQ = "system:serviceaccount:gangq-system:gangq"
TENANT = "alice@example.com"


def load() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(POLICY_FILE.read_text()) if doc]


def policies() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in load() if d["kind"] == "ValidatingAdmissionPolicy"}


def expressions(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    return [
        item["expression"]
        for key in ("matchConditions", "variables", "validations")
        for item in spec.get(key, [])
    ]


def denials(policy: dict[str, Any], obj: dict[str, Any], *, user: str, resource: str) -> list[str]:
    """The messages of the failed validations; [] when the request is admitted."""
    context: dict[str, Any] = {
        "object": obj,
        "oldObject": None,
        "request": {
            "userInfo": {"username": user},
            "operation": "CREATE",
            "resource": {"group": obj["apiVersion"].rpartition("/")[0], "resource": resource},
        },
    }
    spec = policy["spec"]
    if not all(cel.evaluate(c["expression"], context) for c in spec.get("matchConditions", [])):
        return []
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        variables[variable["name"]] = cel.evaluate(
            variable["expression"], {**context, "variables": variables}
        )
    context["variables"] = variables
    return [
        " ".join(v["message"].split())
        for v in spec["validations"]
        if cel.evaluate(v["expression"], context) is not True
    ]


def claim(*requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml-train"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def template(*requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ml-train"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def pod(*claims: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "ml-train"}
    if labels is not None:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if claims:
        spec["resourceClaims"] = list(claims)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def exactly(device_class: str, **extra: Any) -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": device_class, **extra}}


def first_available(*device_classes: str) -> dict[str, Any]:
    return {
        "name": "gpu",
        "firstAvailable": [
            {"name": f"s{i}", "deviceClassName": c} for i, c in enumerate(device_classes)
        ],
    }


MANAGED = "gpu.nvidia.com"
OTHER = "nic.example.com"
REFUSED_CLASS = "devices of this device class are allocated by gangq only"
REFUSED_ADMIN = "adminAccess is not allowed"


def test_every_cel_expression_compiles() -> None:
    compiled = [cel.compile(e) for p in policies().values() for e in expressions(p)]
    assert len(compiled) == 22  # 5 match conditions, 8 variables, 9 validations


def test_every_policy_has_one_denying_binding() -> None:
    bindings = [d for d in load() if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies())
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings)
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies().values())


CLAIM_CASES = [
    pytest.param(claim(exactly(MANAGED)), TENANT, [REFUSED_CLASS], id="tenant-managed-class"),
    pytest.param(claim(exactly(OTHER)), TENANT, [], id="tenant-other-class"),
    pytest.param(
        claim(first_available(OTHER, MANAGED)),
        TENANT,
        [REFUSED_CLASS],
        id="tenant-managed-subrequest",
    ),
    pytest.param(
        claim(exactly(OTHER, adminAccess=True)), TENANT, [REFUSED_ADMIN], id="tenant-admin-access"
    ),
    pytest.param(
        claim(exactly(OTHER, adminAccess=False)), TENANT, [], id="tenant-admin-access-false"
    ),
    pytest.param(
        claim(exactly(OTHER), exactly(MANAGED, adminAccess=True)),
        TENANT,
        [REFUSED_CLASS, REFUSED_ADMIN],
        id="tenant-both",
    ),
    pytest.param(claim(exactly(MANAGED)), GANGQ, [], id="gangq-managed-class"),
    pytest.param(claim(), TENANT, [], id="no-requests"),
]


@pytest.mark.parametrize(("obj", "user", "expected"), CLAIM_CASES)
def test_resource_claims(obj: dict[str, Any], user: str, expected: list[str]) -> None:
    found = denials(policies()["gangq-resourceclaims"], obj, user=user, resource="resourceclaims")
    assert [m[: len(e)] for m, e in zip(found, expected, strict=False)] == expected
    assert len(found) == len(expected)


TEMPLATE_CASES = [
    pytest.param(template(exactly(MANAGED)), TENANT, [REFUSED_CLASS], id="tenant-managed-class"),
    pytest.param(template(exactly(OTHER)), TENANT, [], id="tenant-other-class"),
    pytest.param(
        template(exactly(OTHER, adminAccess=True)),
        TENANT,
        [REFUSED_ADMIN],
        id="tenant-admin-access",
    ),
    pytest.param(
        template(first_available(MANAGED)), TENANT, [REFUSED_CLASS], id="tenant-managed-subrequest"
    ),
    pytest.param(template(exactly(MANAGED)), GANGQ, [], id="gangq"),
]


@pytest.mark.parametrize(("obj", "user", "expected"), TEMPLATE_CASES)
def test_resource_claim_templates(obj: dict[str, Any], user: str, expected: list[str]) -> None:
    found = denials(
        policies()["gangq-resourceclaimtemplates"],
        obj,
        user=user,
        resource="resourceclaimtemplates",
    )
    assert [m[: len(e)] for m, e in zip(found, expected, strict=False)] == expected
    assert len(found) == len(expected)


BY_NAME = {"name": "gpu", "resourceClaimName": "train-llm-0"}
BY_TEMPLATE = {"name": "nic", "resourceClaimTemplateName": "nic"}
REFUSED_NAME = "pods may not reference a ResourceClaim by name"
REFUSED_LABEL = "the label gangq.dev/job-name is reserved"

POD_CASES = [
    pytest.param(pod(), TENANT, [], id="tenant-no-claims"),
    pytest.param(pod(BY_TEMPLATE), TENANT, [], id="tenant-template"),
    pytest.param(pod(BY_NAME), TENANT, [REFUSED_NAME], id="tenant-claim-by-name"),
    pytest.param(
        pod(labels={"gangq.dev/job-name": "train-llm"}),
        TENANT,
        [REFUSED_LABEL],
        id="tenant-gangq-label",
    ),
    pytest.param(pod(labels={"app": "x"}), TENANT, [], id="tenant-other-label"),
    pytest.param(pod(BY_NAME, labels={"gangq.dev/job-name": "train-llm"}), GANGQ, [], id="gangq"),
]


@pytest.mark.parametrize(("obj", "user", "expected"), POD_CASES)
def test_pods(obj: dict[str, Any], user: str, expected: list[str]) -> None:
    found = denials(policies()["gangq-pods"], obj, user=user, resource="pods")
    assert [m[: len(e)] for m, e in zip(found, expected, strict=False)] == expected
    assert len(found) == len(expected)


def test_policies_name_the_controller_service_account_the_base_deploys() -> None:
    root = POLICY_FILE.parent
    account = yaml.safe_load((root / "serviceaccount.yaml").read_text())
    username = (
        f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    )
    assert username == GANGQ
    assert all(GANGQ in p["spec"]["matchConditions"][0]["expression"] for p in policies().values())


TRAINER = "system:serviceaccount:ml-train:trainer"
SERVICE_ACCOUNT_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:ml-train"]


def service_account_user(username: str, **extra: str) -> dict[str, Any]:
    """userInfo as kube-apiserver 1.36 derives it from a service account token: the JTI as
    credential id, and for a token bound to a pod that pod and its node."""
    namespace = username.split(":")[2]
    return {
        "username": username,
        "uid": "0e4d0a3c-6a51-4d1b-9f0e-2b8f6c1d7a10",
        "groups": [
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ],
        "extra": {
            "authentication.kubernetes.io/credential-id": [
                "JTI=6d2f8a9e-3c4b-4e1f-a5d7-1b2c3d4e5f60"
            ],
            **{
                f"authentication.kubernetes.io/{key.replace('_', '-')}": [v]
                for key, v in extra.items()
            },
        },
    }


def pod_token(pod_name: str, username: str = TRAINER) -> dict[str, Any]:
    """The projected token a pod runs with (the kubelet requests it bound to the pod)."""
    return service_account_user(
        username,
        pod_name=pod_name,
        pod_uid="5f1c6f0e-8d8e-4a5e-b0f2-7a3c9e2d4b11",
        node_name="gpu-3",
        node_uid="a9b8c7d6-e5f4-4321-9876-0fedcba98765",
    )


POD_OF = pod_token("train-llm-0")
CREATED_TOKEN = service_account_user(TRAINER)
"""`kubectl create token trainer -n ml-train`: the same account, bound to no pod."""
A_PERSON = {
    "username": TENANT,
    "groups": ["ml-team", "system:authenticated"],
    "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=9a4c1f"]},
}
GARBAGE_COLLECTOR = service_account_user(
    "system:serviceaccount:kube-system:generic-garbage-collector"
)
REFUSED_NOT_BOUND = "a service account may change a TrainingJob only with the token of one of"
REFUSED_FIELDS = "a workload may not change a TrainingJob's spec"
REFUSED_ANNOTATION = "a workload may change only the annotation gangq.dev/last-checkpoint"


def training_job(
    name: str = "train-llm",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    replicas: int = 4,
    finalizers: list[str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml-train"}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    if finalizers is not None:
        metadata["finalizers"] = finalizers
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": metadata,
        "spec": {"tier": "training", "replicas": replicas, "devicesPerReplica": 8},
    }


def update_denials(old: dict[str, Any], new: dict[str, Any], *, user: dict[str, Any]) -> list[str]:
    """`denials` for an UPDATE of a TrainingJob by the authenticated `user` (userInfo)."""
    policy = policies()["gangq-checkpoint-reports"]
    context: dict[str, Any] = {
        "object": new,
        "oldObject": old,
        "request": {
            "userInfo": user,
            "operation": "UPDATE",
            "namespace": new["metadata"]["namespace"],
            "name": new["metadata"]["name"],
            "resource": {"group": "gangq.dev", "version": "v1alpha1", "resource": "trainingjobs"},
        },
    }
    spec = policy["spec"]
    if not all(cel.evaluate(c["expression"], context) for c in spec["matchConditions"]):
        return []
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        variables[variable["name"]] = cel.evaluate(
            variable["expression"], {**context, "variables": variables}
        )
    context["variables"] = variables
    return [
        " ".join(v["message"].split())
        for v in spec["validations"]
        if cel.evaluate(v["expression"], context) is not True
    ]


STAMP = {"gangq.dev/last-checkpoint": "2026-12-01T15:00:00Z"}
OWNER = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "name": "sweep",
    "uid": "c0ffee00-0000-4000-8000-000000000001",
}
REPORT_CASES = [
    pytest.param(training_job(), training_job(annotations=STAMP), POD_OF, [], id="report"),
    pytest.param(
        training_job(annotations={**STAMP, "team": "x"}),
        training_job(
            annotations={"gangq.dev/last-checkpoint": "2026-12-01T16:00:00Z", "team": "x"}
        ),
        POD_OF,
        [],
        id="move-the-report",
    ),
    pytest.param(
        training_job(),
        training_job(annotations=STAMP),
        pod_token("train-llm-3"),
        [],
        id="report-from-another-replica",
    ),
    pytest.param(training_job(), training_job(replicas=8), POD_OF, [REFUSED_FIELDS], id="spec"),
    pytest.param(
        training_job(),
        training_job(labels={"gangq.dev/family": "x"}),
        POD_OF,
        [REFUSED_FIELDS],
        id="labels",
    ),
    pytest.param(
        training_job(annotations={"team": "x"}),
        training_job(annotations={**STAMP}),
        POD_OF,
        [REFUSED_ANNOTATION],
        id="drop-another-annotation",
    ),
    pytest.param(
        training_job(),
        training_job(annotations={**STAMP, "gangq.dev/ending": "{}"}),
        POD_OF,
        [REFUSED_ANNOTATION],
        id="add-another-annotation",
    ),
    pytest.param(
        training_job("train-llm-2"),
        training_job("train-llm-2", annotations=STAMP),
        POD_OF,
        [REFUSED_NOT_BOUND],
        id="another-job",
    ),
    pytest.param(
        training_job(),
        training_job(annotations=STAMP),
        pod_token("train-llm-2-0"),
        [REFUSED_NOT_BOUND],
        id="a-pod-of-a-job-with-a-longer-name",
    ),
    pytest.param(
        training_job(),
        training_job(annotations=STAMP),
        CREATED_TOKEN,
        [REFUSED_NOT_BOUND],
        id="created-token-reports",
    ),
    pytest.param(
        training_job("train-llm-2"),
        training_job("train-llm-2", labels={"gangq.dev/family": "x"}),
        CREATED_TOKEN,
        [REFUSED_NOT_BOUND, REFUSED_FIELDS],
        id="created-token-changes-another-jobs-labels",
    ),
    pytest.param(
        training_job(),
        training_job(annotations=STAMP),
        pod_token("train-llm-0", "system:serviceaccount:ci:deployer"),
        [REFUSED_NOT_BOUND],
        id="a-pod-of-the-same-name-in-another-namespace",
    ),
    pytest.param(
        training_job(),
        training_job(replicas=8),
        service_account_user("system:serviceaccount:ci:deployer"),
        [REFUSED_NOT_BOUND, REFUSED_FIELDS],
        id="a-service-account-of-another-namespace",
    ),
    pytest.param(training_job(), training_job(replicas=8), A_PERSON, [], id="a-person"),
    pytest.param(
        training_job(),
        training_job(replicas=8),
        service_account_user(GANGQ),
        [],
        id="gangq",
    ),
    pytest.param(
        training_job(owners=[OWNER]),
        training_job(owners=[]),
        GARBAGE_COLLECTOR,
        [],
        id="garbage-collector-orphans",
    ),
    pytest.param(
        training_job(finalizers=["foregroundDeletion"]),
        training_job(finalizers=[]),
        GARBAGE_COLLECTOR,
        [],
        id="garbage-collector-ends-a-foreground-deletion",
    ),
]


@pytest.mark.parametrize(("old", "new", "user", "expected"), REPORT_CASES)
def test_checkpoint_reports(
    old: dict[str, Any], new: dict[str, Any], user: dict[str, Any], expected: list[str]
) -> None:
    """A service account changes a TrainingJob only with a token of one of the job's pods, and
    then only the checkpoint annotation; people, gangq and kube-system's controllers are free."""
    found = update_denials(old, new, user=user)
    assert [m[: len(e)] for m, e in zip(found, expected, strict=False)] == expected
    assert len(found) == len(expected)
