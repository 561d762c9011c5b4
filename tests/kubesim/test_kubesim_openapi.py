"""The HTTP shapes kubectl reads before `apply` and for `get`: the OpenAPI v3 index and
documents, OpenAPI v2 as JSON, and Tables for the kinds gangq users look at."""

from __future__ import annotations

from typing import Any

import yaml

from gangq.queue.kubesim.emulator import Emulator
from tests.kubesim.conftest import CRD, Http, claim, pod, wait_until

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def patch_operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Kind -> the PATCH operation of its item path (kubectl checks it for fieldValidation)."""
    found = {}
    for route, operations in document["paths"].items():
        patch = operations.get("patch")
        if patch is not None and route.endswith("{name}"):
            found[patch["x-kubernetes-group-version-kind"]["kind"]] = patch
    return found


async def test_the_v3_index_links_a_document_per_served_group_version(http: Http) -> None:
    code, index, _ = await http.request("GET", "/openapi/v3")
    assert code == 200
    assert {"api/v1", "apis/resource.k8s.io/v1", "apis/gangq.dev/v1alpha1"} <= set(index["paths"])
    for path, entry in index["paths"].items():
        url = entry["serverRelativeURL"]
        assert url.startswith(f"/openapi/v3/{path}?hash=")
        code, document, _ = await http.request("GET", url)
        assert code == 200 and document["openapi"].startswith("3.")
        for kind, operation in patch_operations(document).items():
            parameters = {parameter["name"] for parameter in operation["parameters"]}
            assert {"fieldValidation", "fieldManager", "dryRun"} <= parameters, (path, kind)
            assert "application/merge-patch+json" in operation["requestBody"]["content"]
    code, _, _ = await http.request("GET", "/openapi/v3/apis/nothing.example.com/v1")
    assert code == 404


async def test_core_and_custom_kinds_have_schemas_with_their_group_version_kind(
    http: Http,
) -> None:
    _, core, _ = await http.request("GET", "/openapi/v3/api/v1")
    schemas = core["components"]["schemas"]
    for kind in ("Pod", "Node", "Namespace", "Service", "ConfigMap", "Event"):
        schema = schemas[f"io.k8s.api.core.v1.{kind}"]
        assert schema["x-kubernetes-group-version-kind"] == [
            {"group": "", "version": "v1", "kind": kind}
        ]
    assert set(patch_operations(core)) >= {"Pod", "Node", "Namespace"}
    _, custom, _ = await http.request("GET", "/openapi/v3/apis/gangq.dev/v1alpha1")
    job = custom["components"]["schemas"]["dev.gangq.v1alpha1.TrainingJob"]
    crd = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert job["properties"]["spec"] == crd["properties"]["spec"]
    metadata_ref = job["properties"]["metadata"]["allOf"][0]["$ref"]
    assert metadata_ref.removeprefix("#/components/schemas/") in custom["components"]["schemas"]


async def test_v2_is_served_as_json_and_refuses_protobuf_only(http: Http) -> None:
    code, document, _ = await http.request("GET", "/openapi/v2")
    assert code == 200 and document["swagger"] == "2.0"
    assert "io.k8s.api.resource.v1.ResourceClaim" in document["definitions"]
    refs = str(document)
    assert "#/components/" not in refs and "#/definitions/" in refs
    protobuf = {"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
    code, _, _ = await http.request("GET", "/openapi/v2", headers=protobuf)
    assert code == 406


async def table(http: Http, path: str) -> tuple[list[str], list[list[Any]]]:
    code, body, _ = await http.request("GET", path, headers={"Accept": TABLE})
    assert code == 200 and body["kind"] == "Table", body
    return [c["name"] for c in body["columnDefinitions"]], [row["cells"] for row in body["rows"]]


async def test_tables_of_nodes_namespaces_and_claims_have_the_printers_columns(
    cluster: Emulator, http: Http
) -> None:
    columns, rows = await table(http, "/api/v1/nodes")
    assert columns == [
        "Name", "Status", "Roles", "Age", "Version", "Internal-IP", "External-IP", "OS-Image",
        "Kernel-Version", "Container-Runtime",
    ]  # fmt: skip
    assert rows[0][:3] == ["gpu-0", "Ready", "<none>"] and rows[0][5].startswith("10.")
    columns, rows = await table(http, "/api/v1/namespaces")
    assert columns == ["Name", "Status", "Age"]
    assert ["default", "Active"] in [row[:2] for row in rows]
    claims = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
    code, _, _ = await http.request("POST", claims, claim("c"))
    assert code == 201
    columns, rows = await table(http, claims)
    assert columns == ["Name", "State", "Age"] and rows[0][:2] == ["c", "pending"]
    code, _, _ = await http.request(
        "POST", "/api/v1/namespaces/default/pods", pod("p", claims=("c",))
    )
    assert code == 201
    await wait_until(
        lambda: (
            (cluster.registry.storage.peek("resource.k8s.io/resourceclaims", "default", "c") or {})
            .get("status", {})
            .get("reservedFor")
        )
    )
    _, rows = await table(http, claims)
    assert rows[0][1] == "allocated,reserved"
    columns, rows = await table(http, "/api/v1/namespaces/default/pods")
    assert columns[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert rows[0][0] == "p" and rows[0][3] == "0"
