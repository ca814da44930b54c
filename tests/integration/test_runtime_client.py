"""KubeClient against the real apiserver: verbs, patch types, error mapping, watch, metrics."""

from __future__ import annotations

import uuid

import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from computedomain.devcluster.controlplane import ControlPlane
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.resources import CONFIG_MAPS, EVENTS, NODES
from tests.kit.etcd import compact_etcd

pytestmark = pytest.mark.integration


def config_map(name: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def kube(api_client: ApiClient, registry: CollectorRegistry) -> KubeClient:
    # The api_client fixture owns (and closes) the transport.
    return KubeClient.from_api_client(
        api_client, field_manager="runtime-test", metrics=RuntimeMetrics(registry)
    )


async def test_crud_round_trip_and_error_mapping(
    kube: KubeClient, namespace: str, registry: CollectorRegistry
) -> None:
    created = await kube.create(CONFIG_MAPS, config_map("a", k="1"), namespace)
    assert created["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as exists:
        await kube.create(CONFIG_MAPS, config_map("a"), namespace)
    assert exists.value.is_already_exists
    assert not exists.value.is_conflict

    fetched = await kube.get(CONFIG_MAPS, "a", namespace)
    assert fetched["data"] == {"k": "1"}

    stale = dict(fetched)
    await kube.patch(CONFIG_MAPS, "a", {"data": {"k": "2"}}, namespace)
    with pytest.raises(ApiError) as conflict:
        await kube.replace(CONFIG_MAPS, {**stale, "data": {"k": "3"}}, namespace)
    assert conflict.value.is_conflict
    assert conflict.value.reason == "Conflict"

    listed = await kube.list(CONFIG_MAPS, namespace, label_selector="missing=label")
    assert listed["items"] == []
    assert listed["metadata"]["resourceVersion"]

    await kube.delete(CONFIG_MAPS, "a", namespace)
    with pytest.raises(ApiError) as missing:
        await kube.get(CONFIG_MAPS, "a", namespace)
    assert missing.value.is_not_found
    assert missing.value.reason == "NotFound"

    host = kube.host
    assert (
        registry.get_sample_value(
            "rest_client_requests_total", {"code": "409", "method": "POST", "host": host}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "rest_client_requests_total", {"code": "404", "method": "GET", "host": host}
        )
        == 1
    )


async def test_patch_types_are_sent_with_their_content_types(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIG_MAPS, config_map("p", a="1"), namespace)
    merged = await kube.patch(CONFIG_MAPS, "p", {"data": {"b": "2"}}, namespace)
    assert merged["data"] == {"a": "1", "b": "2"}

    rv = merged["metadata"]["resourceVersion"]
    patched = await kube.patch(
        CONFIG_MAPS,
        "p",
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "remove", "path": "/data/a"},
        ],
        namespace,
        patch_type="json",
    )
    assert patched["data"] == {"b": "2"}

    with pytest.raises(ApiError) as failed_test:
        await kube.patch(
            CONFIG_MAPS,
            "p",
            [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}],
            namespace,
            patch_type="json",
        )
    assert failed_test.value.is_invalid

    applied = await kube.patch(
        CONFIG_MAPS,
        "p",
        config_map("p", c="3"),
        namespace,
        patch_type="apply",
        field_manager="runtime-test-apply",
        force=True,
    )
    assert applied["data"] == {"b": "2", "c": "3"}
    managers = {entry["manager"] for entry in applied["metadata"]["managedFields"]}
    assert {"runtime-test", "runtime-test-apply"} <= managers


async def test_watch_streams_events_and_maps_expired_rv_to_410(
    kube: KubeClient, namespace: str, control_plane: ControlPlane
) -> None:
    listed = await kube.list(CONFIG_MAPS, namespace)
    rv = listed["metadata"]["resourceVersion"]
    name = f"w-{uuid.uuid4().hex[:6]}"
    await kube.create(CONFIG_MAPS, config_map(name), namespace)
    seen: list[tuple[str, str]] = []
    async for event_type, obj in kube.watch(
        CONFIG_MAPS, namespace, resource_version=rv, timeout_seconds=5
    ):
        seen.append((event_type, obj["metadata"]["name"]))
        if event_type == "ADDED" and obj["metadata"]["name"] == name:
            break
    assert ("ADDED", name) in seen

    # Events have no watch cache, so an RV below etcd's compaction point is really gone.
    await compact_etcd(control_plane, kube)
    with pytest.raises(ApiError) as expired:
        async for _ in kube.watch(EVENTS, namespace, resource_version="1", timeout_seconds=5):
            pass
    assert expired.value.status == 410
    assert expired.value.is_gone


async def test_a_table_list_gives_each_rows_metadata_and_printed_cells_page_by_page(
    kube: KubeClient, fleet_nodes: list[str]
) -> None:
    """The Node inventory's LIST: the server's Table with each row's metadata, paged; the
    status column says Ready, and SchedulingDisabled once the Node is cordoned."""
    node = fleet_nodes[0]
    seen: dict[str, dict[str, object]] = {}
    token: str | None = None
    pages = 0
    while True:
        page = await kube.list(NODES, limit=5, continue_token=token, table=True)
        pages += 1
        for item in page["items"]:
            assert "labels" in item["metadata"], item
            assert "spec" not in item
            assert "status" not in item
            seen[item["metadata"]["name"]] = item["columns"]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert pages > 1
    assert set(fleet_nodes) <= set(seen)
    assert seen[node]["Status"] == "Ready"
    await kube.patch(NODES, node, {"spec": {"unschedulable": True}})
    try:
        (row,) = (await kube.list(NODES, field_selector=f"metadata.name={node}", table=True))[
            "items"
        ]
        assert row["columns"]["Status"] == "Ready,SchedulingDisabled"
    finally:
        await kube.patch(NODES, node, {"spec": {"unschedulable": None}})
