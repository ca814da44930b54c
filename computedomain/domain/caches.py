"""The informers the controller reads from, their trimming and their indexes.

Children live in the driver namespace while CDs live in user namespaces, so owner references
cannot link them: every child, daemon pod, clique and Node is indexed by the CD UID it names.

Heartbeats (a status update of every Node every few seconds) would cost a watch event each,
so only Nodes carrying the CD label are watched, whole, as NVIDIA's controller does: readiness,
labels and cliques of the Nodes ComputeDomains use, event-driven; heartbeats are dropped in the
informer (``unchanged``). Every Node (the clique inventory: labels, Ready, cordoned) is polled
instead, by a paged LIST of the Node Table every ``NODE_INVENTORY_RESYNC_INTERVAL`` (metadata
plus the printed status column, not the whole Node), and what the labelled watch learns is
carried into it at once (``LabelledNodeFeed``), so the Nodes of CDs are never a period late.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain import childkinds
from computedomain.domain.childkinds import CHILD, Child, ChildKind, is_of
from computedomain.domain.crdschema import CD_CRD_NAME, CLIQUE_CRD_NAME, missing_status_fields
from computedomain.domain.keys import CDKey
from computedomain.domain.kubeletplugin import trim_plugin_daemonset
from computedomain.domain.labels import cd_uid_of, cd_uids_of_clique
from computedomain.domain.nvidiacontroller import trim_pod_identity
from computedomain.domain.topology import clique_of, reported_cliques
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.informer import FunctionHandler, Informer, strip_managed_fields
from computedomain.runtime.resources import Resource
from computedomain.runtime.store import Store

log = logging.getLogger(__name__)

BY_UID = "uid"
BY_CD = "cd"
BY_GPU_CLIQUE = "gpuClique"
# CDs by the cliques their daemons report (status.nodes): who uses a clique while the clique
# label is missing from the nodes (NVIDIA's kubelet plugin removes it while it restarts).
BY_REPORTED_CLIQUE = "reportedClique"
CD_LABEL_EXISTS = c.CD_LABEL
DEFAULT_NODE_INVENTORY_INTERVAL = 300.0


def _listed(value: str | None) -> list[str]:
    return [value] if value else []


def _by_uid(obj: Mapping[str, Any]) -> Iterable[str]:
    return _listed(objects.uid(obj))


def uids_of_labelled(obj: Mapping[str, Any]) -> list[str]:
    """CD UIDs a child, a daemon pod or a Node names (its CD label): an index and a wake-up."""
    return _listed(cd_uid_of(obj))


def _by_gpu_clique(obj: Mapping[str, Any]) -> Iterable[str]:
    return _listed(clique_of(obj))


def _by_reported_clique(cd: Mapping[str, Any]) -> Iterable[str]:
    return sorted(set(reported_cliques([cd]).values()))


def node_ready(node: Mapping[str, Any]) -> bool:
    """The Node's Ready condition is True."""
    return objects.condition_true(node, "Ready")


_NODE_META_KEPT = ("name", "uid", "resourceVersion", "labels", "deletionTimestamp")
# The status column of a Node's Table row: "Ready", "NotReady" or "Unknown", then
# ",SchedulingDisabled" when it is cordoned (what `kubectl get nodes` prints).
_PRINTED_READY = {"Ready": "True", "NotReady": "False", "Unknown": "Unknown"}


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """Keep what we read of a Node: identity, labels, the Ready condition's status and whether
    it is cordoned. From a whole Node (the labelled watch, our writes' answers, a GET) or from
    a Table row (the inventory's poll, ``columns``), alike.

    With thousands of Nodes, their images, addresses and heartbeats would dominate memory.
    """
    meta = objects.meta(node)
    if (columns := node.get("columns")) is not None:
        printed = str(columns.get("Status") or "").split(",")
        ready = _PRINTED_READY.get(printed[0])
        cordoned = "SchedulingDisabled" in printed[1:]
    else:
        ready = objects.condition(node, "Ready").get("status")
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    trimmed: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {key: meta[key] for key in _NODE_META_KEPT if key in meta},
        "status": {"conditions": [{"type": "Ready", "status": ready}] if ready else []},
    }
    if cordoned:
        trimmed["spec"] = {"unschedulable": True}
    return trimmed


def same_node(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Nothing we keep of the Node changed (labels, readiness, cordon): a heartbeat."""

    def kept(node: Mapping[str, Any]) -> tuple[Any, ...]:
        return (
            objects.labels(node),
            objects.meta(node).get("deletionTimestamp"),
            objects.condition(node, "Ready").get("status"),
            bool((node.get("spec") or {}).get("unschedulable")),
        )

    return kept(old) == kept(new)


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Daemon pods: drop managed fields and the bulky spec parts we never read."""
    pod = strip_managed_fields(pod)
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    pod["spec"] = {
        "nodeName": spec.get("nodeName"),
        # FEATURE_GATES of the daemon tells which status protocol it speaks.
        "containers": [{"name": ctr.get("name"), "env": ctr.get("env")} for ctr in containers],
    }
    return pod


def trim_identity(obj: dict[str, Any]) -> dict[str, Any]:
    """Identity and labels only: what says an object exists, where, and for which CD."""
    meta = objects.meta(obj)
    kept = ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp")
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {key: meta[key] for key in kept if key in meta},
    }


def trim_daemonset(ds: dict[str, Any]) -> dict[str, Any]:
    ds = strip_managed_fields(ds)
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = template_spec.get("containers") or []
    ds["spec"] = {
        "template": {
            "spec": {
                "containers": [
                    {"name": ctr.get("name"), "env": ctr.get("env")} for ctr in containers
                ]
            }
        }
    }
    return ds


class LabelledNodeFeed:
    """Carries what the labelled-Node watch learns into the polled Node inventory.

    The watch reports DELETED both when a labelled Node is deleted and when it loses the CD
    label; a GET tells them apart, so a deleted Node leaves the inventory at once (its daemon
    stops counting: "Node deleted") and a Node that only lost the label keeps existing there.
    """

    def __init__(self, client: KubeClient, inventory: Informer) -> None:
        self._client = client
        self._inventory = inventory
        self._pending: set[asyncio.Task[None]] = set()

    def on_add(self, obj: dict[str, Any]) -> None:
        self._inventory.feed("MODIFIED", obj)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self._inventory.feed("MODIFIED", new)

    def on_delete(self, obj: dict[str, Any]) -> None:
        task = asyncio.get_running_loop().create_task(self.confirm_deleted(obj))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def confirm_deleted(self, obj: dict[str, Any]) -> None:
        name = objects.name(obj) or ""
        try:
            live = await self._client.get(r.NODES, name)
        except Exception as error:
            if isinstance(error, ApiError) and error.is_not_found:
                self._inventory.feed("DELETED", obj)
            else:  # API or transport failure: the next inventory LIST settles it
                log.warning("Node lookup failed", extra={"node": name, "err": repr(error)})
            return
        self._inventory.feed("MODIFIED", live)


@dataclass
class Caches:
    """Read-only views the reconciler works from; writes go to the API, never here."""

    compute_domains: Informer
    # Each child kind's resource (childkinds), labelled with a CD UID, indexed by it: one
    # informer over every namespace when a kind of it lives beside its CD, else one per
    # managed namespace.
    child_informers: Mapping[Resource, list[Informer]]
    daemon_pods: list[Informer]
    cliques: list[Informer]
    # Every Node, trimmed to labels, Ready and cordon, polled (a Table LIST per period), plus
    # whatever the labelled watch learns at once: clique inventory, CD labels, existence.
    nodes: Informer
    # Nodes carrying the CD label, trimmed to identity, labels and Ready: readiness.
    labelled_nodes: Informer
    # The daemon ServiceAccount in the driver namespace, by name (#586: Helm owns it).
    service_accounts: Informer
    # The ComputeDomain CRD alone: whether it keeps our status fields (NVIDIA's chart never
    # upgrades CRDs).
    crds: Informer
    # The ComputeDomainClique CRD alone: with the one above, says which CRD is not installed.
    clique_crds: Informer
    # NVIDIA's controller pods in every namespace, one informer per selector (a label selector
    # cannot say "this label or that one"): a second controller running beside us.
    nvidia_controller_pods: list[Informer]
    # NVIDIA's chart's DaemonSets in every namespace: its kubelet plugin (driver image, and the
    # namespace it serves).
    nvidia_daemonsets: Informer
    # IMEX daemon DaemonSets outside the driver and additional namespaces (a field selector
    # leaves ours out, so this is empty unless another controller made daemons), by CD UID.
    foreign_daemonsets: Informer
    # Those listed before the first sync: made before this process ran (by a controller since
    # gone, or in a namespace being torn down), so no sign that another controller makes them
    # now. One appearing later is (the other two signs cover a controller that stays idle).
    foreign_before_start: set[str] = field(default_factory=set)

    @property
    def all(self) -> list[Informer]:
        return [
            self.compute_domains,
            *self.children,
            *self.daemon_pods,
            *self.cliques,
            self.nodes,
            self.labelled_nodes,
            self.service_accounts,
            self.crds,
            self.clique_crds,
            *self.nvidia_controller_pods,
            self.nvidia_daemonsets,
            self.foreign_daemonsets,
        ]

    @property
    def children(self) -> list[Informer]:
        """The informers of a CD's children (labelled with its UID, our finalizer on them):
        they wake the CD, name UIDs the sweeper checks, and take our writes' responses. They
        come from the child kinds' table; nothing in this layer names a kind."""
        return [informer for found in self.child_informers.values() for informer in found]

    @property
    def synced(self) -> bool:
        return all(informer.has_synced for informer in self.all)

    async def wait_synced(self) -> None:
        """Until every informer has listed once."""
        await asyncio.gather(*(informer.wait_synced() for informer in self.all))

    def foreign_daemonsets_of_live_cds(self) -> list[dict[str, Any]]:
        """IMEX daemon DaemonSets outside our namespaces, made while this process runs, whose
        CD exists and is not being deleted: what is left of a CD deleted while no controller
        ran, or of one going away, is no sign of a second controller at work."""
        return [
            ds
            for ds in self.foreign_daemonsets.store.list()
            if not objects.meta(ds).get("deletionTimestamp")
            and objects.uid(ds) not in self.foreign_before_start
            and (uid := cd_uid_of(ds))
            and any(not objects.meta(cd).get("deletionTimestamp") for cd in self.cds_of(uid))
        ]

    def nvidia_controller_pod_list(self) -> list[dict[str, Any]]:
        """Every pod any of the selectors found (a pod two of them match comes twice)."""
        return [pod for informer in self.nvidia_controller_pods for pod in informer.store.list()]

    @property
    def cds(self) -> Store:
        return self.compute_domains.store

    def labelled_children(self, resource: Resource, uid: str) -> list[dict[str, Any]]:
        """Objects of a child resource labelled with ``uid``, whatever their kind."""
        informers = self.child_informers[resource]
        return [obj for inf in informers for obj in inf.store.by_index(BY_CD, uid)]

    def children_of(self, kind: Child | ChildKind, uid: str) -> list[dict[str, Any]]:
        """The CD's children of this kind (labelled with ``uid``, of the kind's target)."""
        child = kind if isinstance(kind, Child) else CHILD[kind]
        return [obj for obj in self.labelled_children(child.resource, uid) if is_of(child, obj)]

    def children_to_delete(self, uid: str) -> list[tuple[Resource, dict[str, Any]]]:
        """Every child labelled with ``uid``, kind by kind in deletion order; an object of a
        child resource no kind claims (an older controller's, without a target label) goes
        with the last kind of its resource."""
        order = childkinds.by_deletion_order()
        last = {child.resource: child for child in order}
        targets: list[tuple[Resource, dict[str, Any]]] = []
        for child in order:
            found = self.children_of(child, uid)
            if last[child.resource] is child:
                labelled = self.labelled_children(child.resource, uid)
                found += childkinds.unclaimed(child.resource, labelled)
            targets += [(child.resource, obj) for obj in found]
        return targets

    def child_at(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object of a child resource at this name, whoever made it."""
        return next(
            (
                found
                for inf in self.child_informers[resource]
                if inf.namespace in (None, namespace)
                and (found := inf.store.get(f"{namespace}/{name}")) is not None
            ),
            None,
        )

    def pods_of(self, uid: str) -> list[dict[str, Any]]:
        return [pod for inf in self.daemon_pods for pod in inf.store.by_index(BY_CD, uid)]

    def cliques_of(self, uid: str) -> list[dict[str, Any]]:
        return [cl for inf in self.cliques for cl in inf.store.by_index(BY_CD, uid)]

    def node_ready(self, name: str) -> bool | None:
        """Whether the Node is Ready; None when no such Node exists (deleted).

        Readiness is watched only where the CD label is (as NVIDIA does). An existing Node
        without it counts as Ready, so its daemon's own report stands: a daemon runs only on
        labelled Nodes (the DaemonSet's nodeSelector), so such a Node in ``status.nodes`` is in
        passing (its label just went with the workload, and the daemon follows), and calling
        it lost would be a guess.
        """
        if self.nodes.store.get(name) is None:
            return None
        labelled = self.labelled_nodes.store.get(name)
        return True if labelled is None else node_ready(labelled)

    def missing_daemon_service_account(self) -> str | None:
        """``namespace/name`` of the daemon ServiceAccount while it does not exist, else None
        (also when it may not be read: not known missing)."""
        if self.service_accounts.unavailable:
            return None
        key = f"{self.service_accounts.namespace}/{c.DAEMON_SERVICE_ACCOUNT}"
        return None if self.service_accounts.store.get(key) is not None else key

    def compute_domain_crd(self) -> dict[str, Any] | None:
        return self.crds.store.get(CD_CRD_NAME)

    def missing_crds(self) -> list[str]:
        """Our CRDs the apiserver does not have (known once their informers have listed)."""
        return [
            name
            for informer, name in ((self.crds, CD_CRD_NAME), (self.clique_crds, CLIQUE_CRD_NAME))
            if informer.has_synced and not informer.unavailable and informer.store.get(name) is None
        ]

    @property
    def crd_readable(self) -> bool:
        """The CD CRD is watched (else whether it prunes our status fields is not known)."""
        return self.crds.unavailable is None

    def missing_status_fields(self) -> tuple[str, ...]:
        """Our status fields the installed CD CRD would prune; empty when it keeps them."""
        return missing_status_fields(self.compute_domain_crd())

    def compute_domain(self, key: CDKey) -> dict[str, Any] | None:
        """The cached CD of this key, if any."""
        return self.cds.get(key.store_key)

    def cds_of(self, uid: str) -> list[dict[str, Any]]:
        """The cached CDs with this UID (none, or one)."""
        return self.cds.by_index(BY_UID, uid)

    def reported_in(self, clique: str) -> dict[tuple[str, str], str]:
        """(node, CD UID) -> ``clique`` for every daemon of any CD reporting ``clique``."""
        return {
            key: found
            for cd in self.cds.by_index(BY_REPORTED_CLIQUE, clique)
            for key, found in reported_cliques([cd]).items()
            if found == clique
        }

    def known_uids(self) -> set[str]:
        return {uid for cd in self.cds.list() if (uid := objects.uid(cd))}

    def labelled_uids(self) -> set[str]:
        """Every CD UID some child, pod, clique or Node still names."""
        stores = [*(inf.store for inf in self.children), self.nodes.store]
        uids = {uid for store in stores for obj in store.list() for uid in uids_of_labelled(obj)}
        uids.update(
            uid
            for inf in self.cliques
            for clique in inf.store.list()
            for uid in cd_uids_of_clique(clique)
        )
        return uids

    def observe_write(self, res: Resource, obj: dict[str, Any]) -> None:
        """Read-your-writes: put the response of our own write into the cache holding it."""
        namespace = objects.namespace(obj)
        if res is COMPUTE_DOMAINS:
            self.cds.observe_write(obj)
        elif res is r.NODES:
            # Only the inventory: the labelled cache learns from its watch whether the Node
            # still matches (our only Node write removes the label).
            self.nodes.store.observe_write(trim_node(obj))
        else:
            for informer in (*self.children, *self.cliques):
                if informer.resource is res and informer.namespace in (None, namespace):
                    informer.store.observe_write(obj)


def _crd_informer(client: KubeClient, name: str) -> Informer:
    """One CustomResourceDefinition, by name (RBAC grants only ours)."""
    return Informer(
        client,
        r.CUSTOM_RESOURCE_DEFINITIONS,
        field_selector=f"metadata.name={name}",
        transform=strip_managed_fields,
        name=f"customresourcedefinitions/{name}",
    )


# Cached children keep all but managed fields, unless their resource is trimmed further here.
_CHILD_TRIMS: Mapping[Resource, Callable[[dict[str, Any]], dict[str, Any]]] = {
    r.DAEMONSETS: trim_daemonset
}


def _child_informers(
    client: KubeClient, res: Resource, namespaces: Sequence[str]
) -> list[Informer]:
    """Label-selected on CD_LABEL, indexed by it: over every namespace when a kind of ``res``
    lives beside its CD, else in each managed namespace."""
    scopes: Sequence[str | None] = (
        [None] if childkinds.watched_everywhere(res) else list(namespaces)
    )
    return [
        Informer(
            client,
            res,
            namespace=ns,
            label_selector=CD_LABEL_EXISTS,
            transform=_CHILD_TRIMS.get(res, strip_managed_fields),
            indexers={BY_CD: uids_of_labelled},
            name=res.plural if ns is None else f"{res.plural}/{ns}",
        )
        for ns in scopes
    ]


def build_caches(
    client: KubeClient,
    *,
    driver_namespace: str,
    additional_namespaces: Iterable[str] = (),
    node_inventory_interval: float = DEFAULT_NODE_INVENTORY_INTERVAL,
    nvidia_controller_selectors: Sequence[str] = c.NVIDIA_CONTROLLER_SELECTORS,
) -> Caches:
    """DaemonSets, daemon pods and cliques are watched in the driver namespace and the
    additional ones; the daemon ServiceAccount in the driver namespace alone; NVIDIA's
    controller pods and kubelet plugin, and daemon DaemonSets outside those namespaces, in every
    namespace."""
    namespaces = list(dict.fromkeys([driver_namespace, *additional_namespaces]))
    caches = Caches(
        compute_domains=Informer(
            client,
            COMPUTE_DOMAINS,
            transform=strip_managed_fields,
            indexers={BY_UID: _by_uid, BY_REPORTED_CLIQUE: _by_reported_clique},
            name="computedomains",
        ),
        child_informers={
            res: _child_informers(client, res, namespaces) for res in childkinds.resources()
        },
        daemon_pods=[
            Informer(
                client,
                r.PODS,
                namespace=ns,
                label_selector=CD_LABEL_EXISTS,
                transform=trim_pod,
                indexers={BY_CD: uids_of_labelled},
                name=f"pods/{ns}",
            )
            for ns in namespaces
        ],
        cliques=[
            Informer(
                client,
                CLIQUES,
                namespace=ns,
                transform=strip_managed_fields,
                indexers={BY_CD: cd_uids_of_clique},
                name=f"computedomaincliques/{ns}",
            )
            for ns in namespaces
        ],
        nodes=Informer(
            client,
            r.NODES,
            table=True,
            transform=trim_node,
            unchanged=same_node,
            indexers={BY_CD: uids_of_labelled, BY_GPU_CLIQUE: _by_gpu_clique},
            name="nodes",
            poll_interval=node_inventory_interval,
        ),
        labelled_nodes=Informer(
            client,
            r.NODES,
            label_selector=CD_LABEL_EXISTS,
            transform=trim_node,
            unchanged=same_node,
            name="nodes/labelled",
        ),
        service_accounts=Informer(
            client,
            r.SERVICE_ACCOUNTS,
            namespace=driver_namespace,
            field_selector=f"metadata.name={c.DAEMON_SERVICE_ACCOUNT}",
            transform=strip_managed_fields,
            name=f"serviceaccounts/{driver_namespace}",
        ),
        crds=_crd_informer(client, CD_CRD_NAME),
        clique_crds=_crd_informer(client, CLIQUE_CRD_NAME),
        nvidia_controller_pods=[
            Informer(
                client,
                r.PODS,
                label_selector=selector,
                transform=trim_pod_identity,
                name=f"pods/{selector}",
            )
            for selector in nvidia_controller_selectors
        ],
        # NVIDIA's chart's DaemonSets (its kubelet plugin), not ours: those carry no such label.
        nvidia_daemonsets=Informer(
            client,
            r.DAEMONSETS,
            label_selector=c.NVIDIA_CHART_DAEMONSETS_SELECTOR,
            transform=trim_plugin_daemonset,
            name="daemonsets/nvidia",
        ),
        foreign_daemonsets=Informer(
            client,
            r.DAEMONSETS,
            label_selector=CD_LABEL_EXISTS,
            field_selector=",".join(f"metadata.namespace!={ns}" for ns in namespaces),
            transform=trim_identity,
            name="daemonsets/foreign",
        ),
    )
    # First handler of the labelled watch: the inventory is current before any CD is woken.
    caches.labelled_nodes.add_handler(LabelledNodeFeed(client, caches.nodes))

    def listed_before_start(ds: dict[str, Any]) -> None:
        if not caches.foreign_daemonsets.has_synced and (uid := objects.uid(ds)):
            caches.foreign_before_start.add(uid)

    caches.foreign_daemonsets.add_handler(FunctionHandler(add=listed_before_start))
    return caches
