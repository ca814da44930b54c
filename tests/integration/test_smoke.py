"""Smoke tests: the local control plane schedules, allocates DRA devices and enforces RBAC."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.api.constants import CHANNEL_DEVICE_CLASS, DRIVER_NAME
from computedomain.devcluster.rest import request_json
from computedomain.runtime.objects import pod_ready
from tests.kit.controllers import workload_pod
from tests.kit.waiting import eventually

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


async def test_daemonset_lands_one_ready_pod_per_selected_fake_node(
    api_client: ApiClient, namespace: str, fleet_nodes: list[str]
) -> None:
    targets = sorted(fleet_nodes[18:21])  # three nodes of the second rack
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "smoke"},
        "spec": {
            "selector": {"matchLabels": {"app": "smoke"}},
            "template": {
                "metadata": {"labels": {"app": "smoke"}},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": targets,
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "containers": [{"name": "pause", "image": PAUSE_IMAGE}],
                },
            },
        },
    }
    await request_json(
        api_client, "POST", f"/apis/apps/v1/namespaces/{namespace}/daemonsets", daemonset
    )

    async def all_ready() -> list[dict[str, Any]] | None:
        pods = await request_json(
            api_client,
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            query={"labelSelector": "app=smoke"},
        )
        items: list[dict[str, Any]] = pods["items"]
        if len(items) >= len(targets) and all(pod_ready(p) for p in items):
            return items
        return None

    pods = await eventually(all_ready, within=60, what="3 Ready DaemonSet pods")
    assert sorted(p["spec"]["nodeName"] for p in pods) == targets
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert all(p["status"].get("podIP") for p in pods)  # handed out by kwok from its CIDR

    async def status_caught_up() -> dict[str, Any] | None:
        ds = await request_json(
            api_client, "GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/smoke"
        )
        status = ds.get("status", {})
        return status if status.get("numberReady") == len(targets) else None

    status = await eventually(status_caught_up, within=30, what="DaemonSet numberReady == 3")
    assert status["desiredNumberScheduled"] == len(targets)


async def _free_node(api_client: ApiClient, fleet_nodes: list[str]) -> str:
    """A fleet node none of whose devices is allocated by a claim of another test."""
    claims = await request_json(api_client, "GET", "/apis/resource.k8s.io/v1/resourceclaims")
    busy = {
        result["pool"]
        for claim in claims["items"]
        for result in (
            claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results") or []
        )
    }
    return next(name for name in reversed(fleet_nodes) if name not in busy)


async def test_channel_claims_are_allocated_one_per_node(
    api_client: ApiClient, namespace: str, fleet_nodes: list[str]
) -> None:
    node = await _free_node(api_client, fleet_nodes)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "channel"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "channel", "exactly": {"deviceClassName": CHANNEL_DEVICE_CLASS}}
                    ]
                }
            }
        },
    }
    base = f"/api/v1/namespaces/{namespace}/pods"
    await request_json(
        api_client,
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates",
        template,
    )
    await request_json(api_client, "POST", base, workload_pod("first", node, "channel"))

    async def first_bound_with_claim() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pod = await request_json(api_client, "GET", f"{base}/first")
        statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
        if not pod["spec"].get("nodeName") or not statuses:
            return None
        claim = await request_json(
            api_client,
            "GET",
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/"
            f"{statuses[0]['resourceClaimName']}",
        )
        return (pod, claim) if claim.get("status", {}).get("allocation") else None

    pod, claim = await eventually(
        first_bound_with_claim, within=60, what="first pod bound with an allocated claim"
    )
    assert pod["spec"]["nodeName"] == node
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"], r["device"], r["request"]) for r in results] == [
        (DRIVER_NAME, node, "channel-0", "channel")
    ]
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["first"]
    # kwok leaves DRA pods alone (project pod-ready stage): the simulator decides when they run.
    assert pod["status"]["phase"] == "Pending"

    await request_json(api_client, "POST", base, workload_pod("second", node, "channel"))

    async def second_unschedulable() -> dict[str, Any] | None:
        pod = await request_json(api_client, "GET", f"{base}/second")
        for condition in pod.get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition["reason"] == "Unschedulable":
                return pod
        return None

    second = await eventually(
        second_unschedulable, within=60, what="second pod reported Unschedulable"
    )
    assert not second["spec"].get("nodeName")
    claim_name = second["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    second_claim = await request_json(
        api_client,
        "GET",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{claim_name}",
    )
    assert "allocation" not in second_claim.get("status", {})


async def test_service_account_without_a_role_is_forbidden(
    api_client: ApiClient, namespace: str, sa_api_client: Any
) -> None:
    await request_json(
        api_client,
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}},
    )
    client = await sa_api_client(namespace, "nobody")

    review = await request_json(
        client,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == (f"system:serviceaccount:{namespace}:nobody")

    with pytest.raises(ApiException) as denied:
        await request_json(client, "GET", f"/api/v1/namespaces/{namespace}/pods")
    assert denied.value.status == 403
