"""Nodes carrying the CD label are watched whole; every Node's metadata is polled, and the
labelled watch feeds it at once: readiness, lost nodes, a deleted Node told from one that only
lost the label (a GET), and which Node events wake a ComputeDomain (issue 10.3)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from computedomain.api import constants as c
from computedomain.domain import projection
from computedomain.domain.caches import BY_CD, Caches, build_caches, same_node, trim_node
from computedomain.domain.coexistence import CoexistenceMonitor
from computedomain.domain.keys import CDKey, QueueKey
from computedomain.domain.watches import EventRouter, wire
from computedomain.observability.metrics import DomainMetrics
from computedomain.runtime import resources as r
from computedomain.runtime.errors import ApiError
from computedomain.runtime.objects import condition_true
from tests.kit.clock import settle
from tests.unit.domain.test_conditions import node as status_node

UID = "5d1ad1b8-3c3a-4a8e-9d47-0b2cde000001"
Obj = dict[str, Any]
Labels = dict[str, str]


def k8s_node(
    name: str, rv: int, *, ready: bool = True, beat: str = "t0", labels: Labels | None = None
) -> Obj:
    """A whole Node as the apiserver sends it (the metadata watch sends its metadata)."""
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": dict(labels or {})},
        "spec": {"providerID": f"aws:///{name}"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastHeartbeatTime": beat}
            ],
            "images": [{"names": ["x"], "sizeBytes": 1}],
        },
    }


def table_row(node: Obj, *, cordoned: bool = False) -> Obj:
    """A Node as the inventory's Table LIST gives it (``KubeClient.list(table=True)``): its
    metadata and the cells ``kubectl get nodes`` prints."""
    ready = condition_true(node, "Ready")
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": node["metadata"],
        "columns": {
            "Name": node["metadata"]["name"],
            "Status": ("Ready" if ready else "NotReady")
            + (",SchedulingDisabled" if cordoned else ""),
            "Roles": "<none>",
            "Age": "5m",
            "Version": "v1.34.1",
        },
    }


def fill(caches: Caches, *nodes: Obj) -> None:
    """What the two Node LISTs return: the Table of every Node, whole labelled Nodes."""
    for informer in caches.all:
        informer.feed_list([])
    caches.nodes.feed_list([table_row(n) for n in nodes])
    caches.labelled_nodes.feed_list([n for n in nodes if c.CD_LABEL in n["metadata"]["labels"]])


class NodeGetter:
    """Answers the GET of a Node that left the labelled watch: the Node, or 404."""

    def __init__(self) -> None:
        self.live: dict[str, Obj] = {}
        self.gets: list[str] = []

    async def get(self, res: r.Resource, name: str, namespace: str | None = None) -> Obj:
        self.gets.append(name)
        if name not in self.live:
            raise ApiError(404, "NotFound", f'nodes "{name}" not found')
        return self.live[name]


def make_caches(client: NodeGetter | None = None) -> Caches:
    return build_caches(client, driver_namespace="driver")  # type: ignore[arg-type]


def test_readiness_comes_from_labelled_nodes_and_existence_from_all() -> None:
    caches = make_caches()
    fill(
        caches,
        k8s_node("ready", 1, labels={c.CD_LABEL: UID}),
        k8s_node("down", 1, ready=False, labels={c.CD_LABEL: UID}),
        # Readiness of an unlabelled Node is not watched: it counts as Ready.
        k8s_node("unlabelled", 1, ready=False),
    )
    assert caches.node_ready("ready") is True
    assert caches.node_ready("down") is False
    assert caches.node_ready("unlabelled") is True
    assert caches.node_ready("gone") is None
    joined = [status_node(n) for n in ("ready", "down", "unlabelled", "gone")]
    assert projection.lost_nodes(joined, caches.node_ready) == {
        "down": "Node NotReady",
        "gone": "Node deleted",
    }


READY = {"conditions": [{"type": "Ready", "status": "True"}]}


def test_the_node_caches_keep_no_spec_and_no_images() -> None:
    caches = make_caches()
    fill(caches, k8s_node("n", 1, labels={c.CD_LABEL: UID}))
    assert caches.nodes.store.get("n") == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "resourceVersion": "1", "labels": {c.CD_LABEL: UID}},
        "status": READY,
    }
    labelled = caches.labelled_nodes.store.get("n")
    assert labelled is not None
    assert labelled["status"] == READY
    assert "spec" not in labelled
    # Our own write (the label removed at deletion) lands trimmed in the inventory.
    caches.observe_write(r.NODES, k8s_node("n", 2))
    assert caches.nodes.store.get("n") == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "resourceVersion": "2", "labels": {}},
        "status": READY,
    }


def test_the_inventory_reads_ready_and_cordon_from_the_table_row_as_from_a_whole_node() -> None:
    """The printed status column ("NotReady", "Ready,SchedulingDisabled") says what the whole
    Node's Ready condition and spec.unschedulable say; a server that answers without a Table
    sends whole Nodes, read the same."""
    caches = make_caches()
    cordoned_node = {**k8s_node("cordoned", 1), "spec": {"unschedulable": True}}
    for informer in caches.all:
        informer.feed_list([])
    caches.nodes.feed_list(
        [
            table_row(k8s_node("down", 1, ready=False)),
            table_row(cordoned_node, cordoned=True),
            cordoned_node | {"metadata": {"name": "whole", "resourceVersion": "1"}},
        ]
    )
    down, cordoned, whole = (caches.nodes.store.get(n) for n in ("down", "cordoned", "whole"))
    assert down is not None
    assert down["status"] == {"conditions": [{"type": "Ready", "status": "False"}]}
    assert cordoned is not None
    assert whole is not None
    assert cordoned["spec"] == whole["spec"] == {"unschedulable": True}
    assert cordoned["status"] == whole["status"] == READY
    # A later poll where only the age column moved is a heartbeat: nothing is delivered.
    older = table_row(k8s_node("down", 1, ready=False))
    later = table_row(k8s_node("down", 2, ready=False))
    later["columns"]["Age"] = "10m"
    assert same_node(trim_node(older), trim_node(later))
    assert not same_node(
        trim_node(table_row(k8s_node("down", 1, ready=False))),
        trim_node(table_row(k8s_node("down", 2))),
    )


class Queue:
    def __init__(self) -> None:
        self.keys: list[QueueKey] = []

    def add(self, key: QueueKey, priority: int = 0) -> None:
        self.keys.append(key)

    def add_after(self, key: QueueKey, delay: float, priority: int = 0) -> None:
        self.keys.append(key)


class Recorder:
    def record(self, *_: Any, **__: Any) -> bool:
        return True


def wired(client: NodeGetter | None = None) -> tuple[Caches, Queue]:
    caches, queue = make_caches(client), Queue()
    router = EventRouter(caches, queue, orphan_grace=5.0)
    monitor = CoexistenceMonitor(
        Recorder(),  # type: ignore[arg-type]
        DomainMetrics(CollectorRegistry()),
        requeue_all=router.enqueue_all,
    )
    wire(router, monitor)
    fill(
        caches,
        k8s_node("a", 1, labels={c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: "cl.1"}),
        k8s_node("b", 1, labels={c.GPU_CLIQUE_NODE_LABEL: "cl.1"}),
    )
    cd = {"metadata": {"name": "cd", "namespace": "ns", "uid": UID, "resourceVersion": "1"}}
    caches.compute_domains.feed("ADDED", cd)
    queue.keys.clear()
    return caches, queue


def test_heartbeats_wake_nothing() -> None:
    caches, queue = wired()
    a = k8s_node("a", 2, beat="t1", labels={c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: "cl.1"})
    b = k8s_node("b", 2, beat="t1", labels={c.GPU_CLIQUE_NODE_LABEL: "cl.1"})
    caches.nodes.feed("MODIFIED", table_row(a))
    caches.nodes.feed("MODIFIED", table_row(b))
    caches.labelled_nodes.feed("MODIFIED", a)
    assert queue.keys == []
    assert caches.labelled_nodes.resource_version == "2"


def test_readiness_and_label_changes_wake_the_domain() -> None:
    caches, queue = wired()
    down = k8s_node("a", 2, ready=False, labels={c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: "cl.1"})
    caches.labelled_nodes.feed("MODIFIED", down)
    assert set(queue.keys) == {CDKey("ns", "cd")}
    assert caches.node_ready("a") is False
    queue.keys.clear()
    # b, in the same clique, gains the label: seen on the labelled watch, and carried into the
    # polled inventory at once (the CD's members, cliques and sharing read it).
    joined = k8s_node("b", 3, labels={c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: "cl.1"})
    caches.labelled_nodes.feed("ADDED", joined)
    assert set(queue.keys) == {CDKey("ns", "cd")}
    assert [n["metadata"]["name"] for n in caches.nodes.store.by_index(BY_CD, UID)] == ["a", "b"]


async def test_a_labelled_node_that_leaves_the_watch_is_looked_up() -> None:
    client = NodeGetter()
    caches, queue = wired(client)
    # "a" is deleted: the watch's DELETED, then the GET's 404, and the Node is gone at once.
    gone = k8s_node("a", 4, labels={c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: "cl.1"})
    caches.labelled_nodes.feed("DELETED", gone)
    await settle()
    assert client.gets == ["a"]
    assert caches.node_ready("a") is None
    assert caches.nodes.store.get("a") is None
    assert CDKey("ns", "cd") in queue.keys
    # A list of the inventory taken before the deletion does not bring it back.
    caches.nodes.feed_list([table_row(gone)], "3")
    assert caches.node_ready("a") is None


async def test_a_node_that_only_lost_the_label_still_exists() -> None:
    client = NodeGetter()
    caches, queue = wired(client)
    unlabelled = k8s_node("a", 5, ready=False, labels={c.GPU_CLIQUE_NODE_LABEL: "cl.1"})
    client.live["a"] = unlabelled
    caches.labelled_nodes.feed("DELETED", k8s_node("a", 5, labels={c.CD_LABEL: UID}))
    await settle()
    # Existing and unlabelled: Ready by node_ready's rule, and no longer the CD's member.
    assert caches.node_ready("a") is True
    assert caches.nodes.store.by_index(BY_CD, UID) == []
    assert set(queue.keys) == {CDKey("ns", "cd")}
