"""The unit-test world of the reconciler: pre-filled caches over one fake apiserver
(``tests/kit/fakeapi.py``), a fake clock and recorder, and the objects the reconciler tests state
their cases with (a CD, its labelled children, clique entries)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.caches import Caches, build_caches
from computedomain.domain.keys import CDKey, QueueKey
from computedomain.domain.observe import observe
from computedomain.domain.plan import GRACE_MARGIN_SECONDS, StatusPlan, plan_live
from computedomain.domain.reconciler import ComputeDomainReconciler
from computedomain.domain.settings import DaemonSettings, ReconcilerSettings
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.observability.metrics import DomainMetrics
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.access import Access
from computedomain.runtime.controller import Result
from tests.kit.clock import FakeClock
from tests.kit.fakeapi import FakeApiServer

DRIVER_NS = "nvidia-dra-driver-gpu"
NS = "team-a"
UID = "5d1ad1b8-3c3a-4a8e-9d47-0b2cde000001"
GHOST = "5d1ad1b8-3c3a-4a8e-9d47-0b2cde0000ff"
DAEMON = c.daemon_name(UID)
SETTINGS = ReconcilerSettings(
    daemon=DaemonSettings(driver_namespace=DRIVER_NS, image=c.NVIDIA_DRIVER_IMAGE, log_verbosity=4),
    orphan_grace_period=5.0,
    daemon_pod_wait_timeout=60.0,
)
Obj = dict[str, Any]
Call = tuple[str, str, str]


def waiting_for_workload(waited: float = 0.0) -> Result:
    """What a reconcile of a CD waiting for its workload returns, ``waited`` seconds after the
    first: look again when WORKLOAD_START_GRACE_PERIOD is over, at its workload pods."""
    return Result(
        requeue_after=SETTINGS.workload_start_grace_period - waited + GRACE_MARGIN_SECONDS
    )


@dataclass
class FakeRecorder:
    events: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def record(
        self, regarding: Obj, type: str, reason: str, action: str, note: str, **__: Any
    ) -> bool:
        self.events.append((type, reason))
        self.notes.append(note)
        return True


# ---- the world ----------------------------------------------------------------------------------


@dataclass
class World:
    client: FakeApiServer
    caches: Caches
    recorder: FakeRecorder
    clock: FakeClock
    reconciler: ComputeDomainReconciler

    def fill(self, **stores: list[Obj]) -> None:
        """Pre-fill the caches (as a LIST would) with what the apiserver holds; every other
        cache is synced and empty."""
        for informer in self.caches.all:
            informer.feed_list([])
        informers = {
            "cds": [self.caches.compute_domains],
            "daemonsets": self.caches.child_informers[r.DAEMONSETS],
            "rcts": self.caches.child_informers[r.RESOURCE_CLAIM_TEMPLATES],
            "pods": self.caches.daemon_pods,
            "nodes": [self.caches.nodes],
            "labelled_nodes": [self.caches.labelled_nodes],
            "service_accounts": [self.caches.service_accounts],
            "cliques": self.caches.cliques,
        }
        if "nodes" in stores:  # the labelled-Node cache sees what its label selector selects
            stores["labelled_nodes"] = [
                n for n in stores["nodes"] if c.CD_LABEL in objects.labels(n)
            ]
        for name, items in stores.items():
            informers[name][0].feed_list(items)

    def observe(self, key: CDKey) -> DomainSnapshot:
        """The snapshot the live path of ``key``'s reconcile would plan from now."""
        obj = self.caches.compute_domain(key)
        assert obj is not None, f"{key} is not in the cache"
        return observe(self.reconciler.context, obj)

    async def plan_status(self, key: CDKey, deleting: bool = False) -> StatusPlan:
        """The status plan of ``key`` now, as ``StatusWriter.update`` would apply it: on the
        live path its children as they are (none created); ``deleting``, none (as the
        deletion calls it)."""
        snapshot = self.observe(key)
        children = plan_live(snapshot, self.reconciler.children.refused, self.clock.now()).known
        if deleting:
            children = {}
        writer, mode, pods = self.reconciler.status, snapshot.mode, list(snapshot.pods)
        observed = await writer.observe(snapshot.cd, children, mode, pods, deleting)
        return writer.plan(snapshot.cd, snapshot.obj, observed, children, mode, deleting)

    async def reconcile(self, key: QueueKey) -> Result:
        self.client.forget_calls()
        result = await self.reconciler.reconcile(key)
        return result


def make_world(
    settings: ReconcilerSettings = SETTINGS,
    recorder: Any = None,
    registry: CollectorRegistry | None = None,
    backlog: Callable[[], int] | None = None,
    standing_by: Callable[[], str] = lambda: "",
    access: Access | None = None,
) -> World:
    """A reconciler over empty caches, one fake client, a recorder and a FakeClock;
    ``backlog`` stands for the work queue's waiting keys (none by default), ``standing_by``
    for NVIDIA's controller running (never by default), ``access`` for what RBAC grants
    (everything by default)."""
    client, clock = FakeApiServer(), FakeClock()
    recorder = recorder if recorder is not None else FakeRecorder()
    caches = build_caches(client, driver_namespace=DRIVER_NS)  # type: ignore[arg-type]
    reconciler = ComputeDomainReconciler(
        client,  # type: ignore[arg-type]
        caches,
        settings,
        recorder,
        DomainMetrics(registry if registry is not None else CollectorRegistry()),
        clock,
        backlog=backlog,
        standing_by=standing_by,
        access=access,
    )
    return World(client, caches, recorder, clock, reconciler)


def compute_domain(**meta: Any) -> Obj:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CD_KIND,
        "metadata": {"name": "cd", "namespace": NS, "uid": UID, "generation": 1, **meta},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "channel"}}},
    }


def service_account() -> Obj:
    return {"metadata": {"name": c.DAEMON_SERVICE_ACCOUNT, "namespace": DRIVER_NS}}


def labelled(name: str, namespace: str, uid: str = UID, **extra_labels: str) -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {c.CD_LABEL: uid, **extra_labels},
            "finalizers": [c.FINALIZER],
        }
    }


def daemon_entry(node_name: str, ip: str, status: str, clique_id: str = "rack0.0") -> Obj:
    """One daemon's entry in a clique, as NVIDIA's daemon writes it."""
    return {
        "nodeName": node_name,
        "ipAddress": ip,
        "cliqueID": clique_id,
        "index": 0,
        "status": status,
    }


def clique_of_cd(clique_id: str, daemons: list[Obj]) -> Obj:
    """The CD's ComputeDomainClique for ``clique_id`` in the driver namespace."""
    return {
        "metadata": {
            "name": c.clique_name(UID, clique_id),
            "namespace": DRIVER_NS,
            "labels": {c.CD_LABEL: UID, c.CLIQUE_ID_LABEL: clique_id},
        },
        "daemons": daemons,
    }


def with_children(world: World, daemonset: Obj | None = None) -> dict[str, list[Obj]]:
    """The CD (finalizer on) and its three children, as the apiserver holds them: the stores
    to ``World.fill`` the caches with."""
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER]))
    rcts = [
        world.client.add(
            r.RESOURCE_CLAIM_TEMPLATES,
            labelled("channel", NS, **{c.TARGET_LABEL: c.TARGET_WORKLOAD}),
        ),
        world.client.add(
            r.RESOURCE_CLAIM_TEMPLATES,
            labelled(DAEMON, DRIVER_NS, **{c.TARGET_LABEL: c.TARGET_DAEMON}),
        ),
    ]
    daemonsets = [world.client.add(r.DAEMONSETS, daemonset or labelled(DAEMON, DRIVER_NS))]
    return {"cds": [cd], "rcts": rcts, "daemonsets": daemonsets}


def node_label_moves_after_the_list(world: World, node: str, to_uid: str) -> None:
    """The kubelet plugin gives ``node`` to the CD ``to_uid`` right after the next LIST of
    Nodes answers: what the deletion listed as ours is someone else's by its patch."""
    listed = world.client.list

    async def list_then_relabel(*args: Any, **kwargs: Any) -> Any:
        answer = await listed(*args, **kwargs)
        if args and args[0] == r.NODES:
            world.client.objects[("nodes", "", node)]["metadata"]["labels"][c.CD_LABEL] = to_uid
            world.client.bump(r.NODES, node)
        return answer

    world.client.list = list_then_relabel  # type: ignore[method-assign]
