"""The CRDs under crds/ on a real kube-apiserver: upstream behaviour kept, additions work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.api import constants as c
from computedomain.api.v1beta1 import (
    ComputeDomain,
    ComputeDomainNode,
    ComputeDomainStatus,
    Condition,
)
from computedomain.devcluster.rest import request_json

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "computedomain.yaml"
GROUP_PATH = f"/apis/{c.GROUP}/{c.VERSION}"


def cds_path(namespace: str, name: str | None = None, status: bool = False) -> str:
    path = f"{GROUP_PATH}/namespaces/{namespace}/{c.CD_PLURAL}"
    if name:
        path += f"/{name}"
    if status:
        path += "/status"
    return path


def cd_body(name: str, rct: str = "imex-channel-0", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CD_KIND,
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": rct}}, **spec},
    }


def error_message(error: ApiException) -> str:
    body = json.loads(error.body) if error.body else {}
    return str(body.get("message", ""))


async def create_cd(api: ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return await request_json(api, "POST", cds_path(namespace), body)


async def test_upstream_sample_is_accepted_with_defaults(
    api_client: ApiClient, namespace: str
) -> None:
    sample = yaml.safe_load(SAMPLE.read_text())
    created = await create_cd(api_client, namespace, sample)
    assert created["spec"] == {
        "numNodes": 1,
        "channel": {
            "resourceClaimTemplate": {"name": "imex-channel-0"},
            "allocationMode": "Single",
        },
    }
    # Status is ignored on create: absent until the controller writes it.
    assert "status" not in created
    assert ComputeDomain.model_validate(created).uid


async def test_defaults_applied(api_client: ApiClient, namespace: str) -> None:
    created = await create_cd(api_client, namespace, cd_body("defaults"))
    assert created["spec"]["numNodes"] == 0
    assert created["spec"]["channel"]["allocationMode"] == "Single"


@pytest.mark.parametrize(
    "change",
    [
        {"numNodes": 3},
        {"channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}, "allocationMode": "All"}},
        {"channel": {"resourceClaimTemplate": {"name": "other"}, "allocationMode": "Single"}},
    ],
)
async def test_spec_is_immutable(
    api_client: ApiClient, namespace: str, change: dict[str, Any]
) -> None:
    created = await create_cd(api_client, namespace, cd_body("frozen"))
    created["spec"].update(change)
    with pytest.raises(ApiException) as rejected:
        await request_json(api_client, "PUT", cds_path(namespace, "frozen"), created)
    assert rejected.value.status == 422
    assert "A computeDomain.spec is immutable" in error_message(rejected.value)


@pytest.mark.parametrize("rct", ["Imex_Channel", "-leading-dash", "a..b", "x" * 254])
async def test_bad_rct_names_are_rejected_clearly(
    api_client: ApiClient, namespace: str, rct: str
) -> None:
    with pytest.raises(ApiException) as rejected:
        await create_cd(api_client, namespace, cd_body("bad-rct", rct=rct))
    assert rejected.value.status == 422
    message = error_message(rejected.value)
    assert "spec.channel.resourceClaimTemplate.name" in message
    if len(rct) <= 253:
        assert "DNS-1123 subdomain" in message
    else:
        assert "253" in message


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"numNodes": -1}, "spec.numNodes"),
        (
            {"channel": {"resourceClaimTemplate": {"name": "x"}, "allocationMode": "Some"}},
            "allocationMode",
        ),
    ],
)
async def test_upstream_validation_kept(
    api_client: ApiClient, namespace: str, spec: dict[str, Any], fragment: str
) -> None:
    body = cd_body("invalid")
    body["spec"].update(spec)
    with pytest.raises(ApiException) as rejected:
        await create_cd(api_client, namespace, body)
    assert rejected.value.status == 422
    assert fragment in error_message(rejected.value)


async def put_status(
    api: ApiClient, namespace: str, name: str, status: dict[str, Any]
) -> dict[str, Any]:
    current = await request_json(api, "GET", cds_path(namespace, name))
    current["status"] = status
    return await request_json(api, "PUT", cds_path(namespace, name, status=True), current)


def node(name: str, index: int, clique: str = "cluster.1", status: str = "Ready") -> dict[str, Any]:
    return ComputeDomainNode.model_validate(
        {
            "name": name,
            "ipAddress": "10.0.0.1",
            "cliqueID": clique,
            "index": index,
            "status": status,
        }
    ).to_dict()


async def test_duplicate_status_node_names_are_rejected(
    api_client: ApiClient, namespace: str
) -> None:
    await create_cd(api_client, namespace, cd_body("dups"))
    with pytest.raises(ApiException) as rejected:
        await put_status(
            api_client,
            namespace,
            "dups",
            {"status": "NotReady", "nodes": [node("n1", 0), node("n1", 1)]},
        )
    assert rejected.value.status == 422
    assert "Duplicate value" in error_message(rejected.value)


async def test_status_round_trip_with_our_fields(api_client: ApiClient, namespace: str) -> None:
    await create_cd(api_client, namespace, cd_body("status"))
    ready = Condition.model_validate(
        {
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": "2026-05-01T10:00:00Z",
            "reason": "DaemonsNotReady",
            "message": "0 of 1 daemon ready; n2: CrashLoopBackOff",
        }
    )
    status = ComputeDomainStatus(
        status="NotReady",
        nodes=[
            ComputeDomainNode.model_validate(node("n1", 0)),
            ComputeDomainNode.model_validate(node("n2", -1, clique="", status="NotReady")),
        ],
        conditions=[ready],
        observed_generation=1,
        node_count=2,
        ready_node_count=1,
        clique_count=1,
    ).to_dict()
    written = await put_status(api_client, namespace, "status", status)
    assert written["status"] == status
    assert written["status"]["nodes"][0]["index"] == 0

    # A node entry without status gets the upstream default.
    partial = {"status": "NotReady", "nodes": [{"name": "n3", "ipAddress": "1", "cliqueID": ""}]}
    written = await put_status(api_client, namespace, "status", partial)
    assert written["status"]["nodes"] == [
        {"name": "n3", "ipAddress": "1", "cliqueID": "", "status": "NotReady"}
    ]


def ready_condition(status: str, reason: str) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "lastTransitionTime": "2026-05-01T10:00:00Z",
        "reason": reason,
        "message": "",
    }


async def table_of(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """What `kubectl get` receives: the apiserver's Table rendering of the printer columns."""
    table: dict[str, Any] = await api.call_api(
        cds_path(namespace, name),
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return table


def default_view(table: dict[str, Any]) -> dict[str, Any]:
    """Column → cell of the first row, for the columns `kubectl get` shows without -o wide."""
    (row,) = table["rows"]
    return {
        col["name"]: cell
        for col, cell in zip(table["columnDefinitions"], row["cells"], strict=True)
        if col["priority"] == 0
    }


async def test_printer_columns_short_name_and_category(
    api_client: ApiClient, namespace: str
) -> None:
    await create_cd(api_client, namespace, cd_body("table"))
    await put_status(
        api_client,
        namespace,
        "table",
        {
            "status": "Ready",
            "nodes": [node("n1", 0), node("n2", 1)],
            "conditions": [ready_condition("True", "AllNodesJoined")],
            "nodeCount": 2,
            "readyNodeCount": 2,
            "cliqueCount": 1,
        },
    )
    table = await table_of(api_client, namespace, "table")
    columns = [(col["name"], col["priority"]) for col in table["columnDefinitions"]]
    assert columns == [
        ("Name", 0),
        ("Ready", 0),
        ("Reason", 0),
        ("Nodes", 0),
        ("Ready-Nodes", 0),
        ("Cliques", 0),
        ("Daemons", 1),  # NVIDIA's status.status: -o wide only
        ("NumNodes", 1),
        ("Age", 0),
    ]
    (row,) = table["rows"]
    assert row["cells"][:8] == ["table", "True", "AllNodesJoined", 2, 2, 1, "Ready", 0]

    discovery = await request_json(api_client, "GET", GROUP_PATH)
    resources = {r["name"]: r for r in discovery["resources"]}
    assert resources[c.CD_PLURAL]["categories"] == [c.CRD_CATEGORY]
    assert resources[c.CD_PLURAL]["shortNames"] == ["cdom"]
    assert "categories" not in resources[c.CLIQUE_PLURAL]


async def test_default_columns_never_contradict_themselves(
    api_client: ApiClient, namespace: str
) -> None:
    """Issue 12: with a template-name clash (or no daemon yet) NVIDIA's status.status says
    Ready while the domain is not. Without -o wide only READY and its REASON speak."""
    await create_cd(api_client, namespace, cd_body("clash"))
    await put_status(
        api_client,
        namespace,
        "clash",
        {
            "status": "Ready",  # upstream's verdict: numNodes 0 and no nodes (#767)
            "conditions": [ready_condition("False", "ForeignObject")],
            "nodeCount": 0,
            "readyNodeCount": 0,
            "cliqueCount": 0,
        },
    )
    shown = default_view(await table_of(api_client, namespace, "clash"))
    assert shown["Ready"] == "False"
    assert shown["Reason"] == "ForeignObject"
    assert "Ready" not in shown.values(), shown  # no column says Ready beside READY False


async def test_clique_crd_accepts_daemon_writes(api_client: ApiClient, namespace: str) -> None:
    uid = "0b7c3f4e-2a1d-4c5b-9e8f-6a7b8c9d0e1f"
    body: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.CLIQUE_KIND,
        "metadata": {
            "name": f"{uid}.cluster.1",
            "labels": {c.CD_LABEL: uid, c.CLIQUE_ID_LABEL: "cluster.1"},
        },
        "daemons": [
            {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "cluster.1", "index": 0},
        ],
    }
    created = await request_json(
        api_client, "POST", f"{GROUP_PATH}/namespaces/{namespace}/{c.CLIQUE_PLURAL}", body
    )
    assert created["daemons"] == [{**body["daemons"][0], "status": "NotReady"}]
    body["metadata"]["name"] = f"{uid}.cluster.2"
    body["daemons"] = [body["daemons"][0], {**body["daemons"][0], "index": 1}]
    with pytest.raises(ApiException) as rejected:
        await request_json(
            api_client, "POST", f"{GROUP_PATH}/namespaces/{namespace}/{c.CLIQUE_PLURAL}", body
        )
    assert rejected.value.status == 422
    assert "Duplicate value" in error_message(rejected.value)
