"""Informer against the real apiserver: events, selectors, relist after 410, bookmarks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.devcluster.controlplane import ControlPlane
from computedomain.runtime.client import KubeClient
from computedomain.runtime.clock import SystemClock, format_microtime
from computedomain.runtime.informer import FunctionHandler, Informer
from computedomain.runtime.objects import meta, object_key, resource_version
from computedomain.runtime.patches import remove_finalizer
from computedomain.runtime.resources import CONFIG_MAPS, EVENTS, NODES, Resource
from tests.kit.etcd import compact_etcd
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

SELECTED = "runtime-test=informer"


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def handler(self) -> FunctionHandler:
        return FunctionHandler(
            add=lambda o: self.events.append(("add", object_key(o), o)),
            update=lambda old, new: self.events.append(("update", object_key(new), new)),
            delete=lambda o: self.events.append(("delete", object_key(o), o)),
        )

    def kinds(self, key: str) -> list[str]:
        return [kind for kind, k, _ in self.events if k == key]


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_synced(), 30)
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def kube(api_client: ApiClient) -> KubeClient:
    return KubeClient.from_api_client(api_client, field_manager="runtime-test")


def config_map(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


def labelled() -> dict[str, str]:
    key, value = SELECTED.split("=")
    return {key: value}


async def test_add_update_delete_are_delivered_and_selector_respected(
    kube: KubeClient, namespace: str
) -> None:
    await kube.create(CONFIG_MAPS, config_map("before", labelled()), namespace)
    informer = Informer(kube, CONFIG_MAPS, namespace=namespace, label_selector=SELECTED)
    seen = Seen()
    informer.add_handler(seen.handler())
    async with running(informer):
        assert informer.has_synced
        assert informer.store.keys() == [f"{namespace}/before"]
        await kube.create(CONFIG_MAPS, config_map("other", {"unrelated": "x"}), namespace)
        await kube.create(CONFIG_MAPS, config_map("a", labelled(), v="1"), namespace)
        await kube.patch(CONFIG_MAPS, "a", {"data": {"v": "2"}}, namespace)
        await kube.delete(CONFIG_MAPS, "a", namespace)
        key = f"{namespace}/a"

        async def all_seen() -> bool:
            return seen.kinds(key) == ["add", "update", "delete"]

        await eventually(all_seen, within=20, what="add/update/delete of configmap a")
        update = next(o for kind, k, o in seen.events if k == key and kind == "update")
        assert update["data"] == {"v": "2"}
        assert update["kind"] == "ConfigMap"
        assert not seen.kinds(f"{namespace}/other")
        assert key not in informer.store
        assert seen.kinds(f"{namespace}/before") == ["add"]


async def test_the_answer_that_removed_the_last_finalizer_takes_the_object_out_of_the_store(
    kube: KubeClient, namespace: str
) -> None:
    """The apiserver deletes an object as it answers the write that empties its finalizers,
    and that answer carries the resourceVersion the object already had: the store holding that
    version drops the object on the answer, before any watch event."""
    finalizer = "example.com/runtime-test"
    body = config_map("finalized", labelled())
    body["metadata"]["finalizers"] = [finalizer]
    await kube.create(CONFIG_MAPS, body, namespace)
    informer = Informer(kube, CONFIG_MAPS, namespace=namespace, label_selector=SELECTED)
    key = f"{namespace}/finalized"
    deleting = asyncio.Event()
    informer.add_handler(
        FunctionHandler(
            update=lambda _, new: deleting.set() if meta(new).get("deletionTimestamp") else None
        )
    )
    async with running(informer):
        await kube.delete(CONFIG_MAPS, "finalized", namespace)
        await asyncio.wait_for(deleting.wait(), 20)  # the deletionTimestamp reached the store
    # Stopped: no watch event can take it out first.
    cached = informer.store.get(key)
    patch = remove_finalizer(cached or {}, finalizer)
    written = await kube.patch(CONFIG_MAPS, "finalized", patch, namespace, patch_type="json")
    assert resource_version(written) == resource_version(cached)
    assert meta(written).get("deletionTimestamp")
    assert not meta(written).get("finalizers")
    assert informer.store.observe_write(written)
    assert key not in informer.store


def event(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "labels": labels},
        "eventTime": format_microtime(SystemClock().wall()),
        "reportingController": "example.com/runtime-test",
        "reportingInstance": "runtime-test",
        "action": "Testing",
        "reason": "Tested",
        "type": "Normal",
        "note": "x",
        "regarding": {"kind": "ConfigMap", "namespace": namespace, "name": "x", "apiVersion": "v1"},
    }


async def test_relist_after_410_delivers_tombstones_and_missed_adds(
    kube: KubeClient, namespace: str, control_plane: ControlPlane
) -> None:
    # Events are served from etcd (no watch cache), so compaction makes our RV really stale.
    await kube.create(EVENTS, event("kept", namespace, labelled()), namespace)
    await kube.create(EVENTS, event("vanishes", namespace, labelled()), namespace)
    informer = Informer(kube, EVENTS, namespace=namespace, label_selector=SELECTED)
    seen = Seen()
    informer.add_handler(seen.handler())
    async with running(informer):
        assert sorted(informer.store.keys()) == [f"{namespace}/kept", f"{namespace}/vanishes"]
    last_state = informer.store.get(f"{namespace}/vanishes")

    # While nobody watches: one object goes, one comes, and history is compacted away.
    await kube.delete(EVENTS, "vanishes", namespace)
    await kube.create(EVENTS, event("arrives", namespace, labelled()), namespace)
    await kube.create(CONFIG_MAPS, config_map("bump"), namespace)
    await compact_etcd(control_plane, kube)
    seen.events.clear()

    async with running(informer):

        async def relisted() -> bool:
            return informer.relists >= 1 and f"{namespace}/arrives" in informer.store

        await eventually(relisted, within=30, what="relist after 410")
    assert seen.kinds(f"{namespace}/vanishes") == ["delete"]
    tombstone = next(o for kind, k, o in seen.events if kind == "delete")
    assert tombstone == last_state
    assert seen.kinds(f"{namespace}/arrives") == ["add"]
    assert seen.kinds(f"{namespace}/kept") == []
    assert sorted(informer.store.keys()) == [f"{namespace}/arrives", f"{namespace}/kept"]


async def test_bookmarks_advance_the_resource_version(kube: KubeClient, namespace: str) -> None:
    # A short server timeout makes the apiserver send a bookmark shortly before it expires,
    # but only when the cache moved on while the watch was open: keep writing unselected data.
    informer = Informer(
        kube, CONFIG_MAPS, namespace=namespace, label_selector=SELECTED, watch_timeout=(5, 5)
    )
    async with running(informer):
        start = int(informer.resource_version or 0)
        unrelated = await kube.create(CONFIG_MAPS, config_map("unrelated"), namespace)
        target = int(unrelated["metadata"]["resourceVersion"])
        assert target > start
        writes = 0

        async def advanced() -> bool:
            nonlocal writes
            if int(informer.resource_version or 0) >= target:
                return True
            writes += 1
            await kube.patch(CONFIG_MAPS, "unrelated", {"data": {"n": str(writes)}}, namespace)
            return False

        await eventually(
            advanced, within=20, what="a bookmark past the unrelated write", interval=1
        )
        assert len(informer.store) == 0


async def test_a_paged_metadata_only_informer_holds_every_node(
    kube: KubeClient, fleet_nodes: list[str]
) -> None:
    """Nodes as PartialObjectMetadata, listed 10 at a time: the cache equals a live LIST, and
    a label change arrives through the metadata watch."""
    informer = Informer(kube, NODES, metadata_only=True, page_size=10)
    seen = Seen()
    informer.add_handler(seen.handler())
    victim = fleet_nodes[0]
    try:
        async with running(informer):
            live = {n["metadata"]["name"] for n in (await kube.list(NODES))["items"]}
            assert len(live) > 10
            assert set(informer.store.keys()) == live
            assert informer.list_requests == -(-len(live) // 10)
            stored = informer.store.get(victim)
            assert stored is not None
            assert (stored["kind"], stored["apiVersion"]) == ("Node", "v1")
            assert "status" not in stored
            assert "spec" not in stored
            assert stored["metadata"]["labels"]["kubernetes.io/hostname"] == victim
            await kube.patch(NODES, victim, {"metadata": {"labels": {"runtime-test": "paged"}}})

            async def relabelled() -> bool:
                node = informer.store.get(victim) or {}
                labels = node.get("metadata", {}).get("labels", {})
                return bool(labels.get("runtime-test") == "paged")

            await eventually(relabelled, within=20, what="the label via the metadata watch")
    finally:
        await kube.patch(NODES, victim, {"metadata": {"labels": {"runtime-test": None}}})


class CompactingClient:
    """The real client, compacting etcd right after the first page of the first LIST, so
    that page's continue token expires (410) before it is used."""

    def __init__(self, kube: KubeClient, compact: Any) -> None:
        self._kube, self._compact = kube, compact
        self.compacted = False

    async def list(self, res: Resource, **kwargs: Any) -> dict[str, Any]:
        page = await self._kube.list(res, **kwargs)
        if not self.compacted and page["metadata"].get("continue"):
            self.compacted = True
            await self._compact()
        return page

    def watch(self, res: Resource, **kwargs: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        return self._kube.watch(res, **kwargs)


async def test_an_expired_continue_token_lists_again_from_the_start(
    kube: KubeClient, namespace: str, control_plane: ControlPlane
) -> None:
    # Events are served from etcd (no watch cache): compaction expires the continue token.
    names = [f"e{i}" for i in range(5)]
    for name in names:
        await kube.create(EVENTS, event(name, namespace, labelled()), namespace)

    async def compact() -> None:
        # A write first: compaction keeps the revision it compacts to (the list's own).
        await kube.create(CONFIG_MAPS, config_map("bump"), namespace)
        await compact_etcd(control_plane, kube)

    client = CompactingClient(kube, compact)
    informer = Informer(
        client,  # type: ignore[arg-type]
        EVENTS,
        namespace=namespace,
        label_selector=SELECTED,
        page_size=2,
    )
    async with running(informer):
        assert client.compacted
        # 3 pages, the second refused as expired, then all 3 again.
        assert informer.list_requests == 5
        assert sorted(informer.store.keys()) == [f"{namespace}/{n}" for n in names]
