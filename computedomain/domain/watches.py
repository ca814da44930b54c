"""What wakes a ComputeDomain, and the wiring of the informers to the work queue.

(The place kubebuilder keeps ``SetupWithManager`` beside ``Reconcile``.) Children live in
another namespace than their CD, so every event is mapped through the CD UID it names:

- ComputeDomains (add, update, delete): that CD;
- DaemonSets, RCTs, daemon pods (any): the CD of the UID label, the old and the new one;
- ComputeDomainCliques (any): the CDs its label and its name name, old and new;
- Nodes (add, delete, a label change; the polled inventory of every Node, which the labelled
  watch feeds at once): the CD of the label, old and new, and every CD with a node in the same
  NVLink clique (its sharing findings change);
- labelled Nodes (add, delete, a readiness change): the CD of the label, old and new;
- the daemon ServiceAccount (add, delete): every CD (#586);
- the CD CRD and NVIDIA's controller pods (any): the ``CoexistenceMonitor``.

A UID that no cached CD has becomes an ``OrphanKey`` after the grace period, once the CD
cache has synced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from computedomain.domain.caches import BY_GPU_CLIQUE, Caches, uids_of_labelled
from computedomain.domain.coexistence import CoexistenceMonitor
from computedomain.domain.keys import CDKey, OrphanKey, QueueKey
from computedomain.domain.labels import cd_uid_of, cd_uids_of_clique
from computedomain.domain.topology import clique_of
from computedomain.runtime import objects
from computedomain.runtime.informer import FunctionHandler

Obj = Mapping[str, Any]
UidsOf = Callable[[Obj], list[str]]


class Queue(Protocol):
    """The part of ``WorkQueue`` the handlers use."""

    def add(self, key: QueueKey, priority: int = 0) -> None: ...

    def add_after(self, key: QueueKey, delay: float, priority: int = 0) -> None: ...


def uids_of_change(uids_of: UidsOf, old: Obj | None, new: Obj | None) -> list[str]:
    """CDs a change concerns: the new and the old owner when a label moved (a Node relabelled
    from one CD to another must wake both). New first, each once."""
    uids: list[str] = []
    for obj in (new, old):
        for uid in uids_of(obj) if obj is not None else []:
            if uid not in uids:
                uids.append(uid)
    return uids


class EventRouter:
    """Turns informer callbacks into queue keys."""

    def __init__(self, caches: Caches, queue: Queue, orphan_grace: float) -> None:
        self.caches = caches
        self._queue = queue
        self._orphan_grace = orphan_grace

    def enqueue_all(self, priority: int = 0) -> None:
        for cd in self.caches.cds.list():
            self._queue.add(CDKey.of(cd), priority=priority)

    def _for_uids(self, uids: Iterable[str]) -> None:
        for uid in uids:
            cds = self.caches.cds_of(uid)
            for cd in cds:
                self._queue.add(CDKey.of(cd))
            if not cds and self.caches.compute_domains.has_synced:
                # Seen on sight; the orphan reconcile applies the grace period and a live check.
                self._queue.add_after(OrphanKey(uid), self._orphan_grace)

    def on_cd(self, obj: Obj) -> None:
        self._queue.add(CDKey.of(obj))

    def on_owned(self, uids_of: UidsOf) -> FunctionHandler:
        """Handler for objects that name their CD(s) through ``uids_of``."""
        return FunctionHandler(
            add=lambda obj: self._for_uids(uids_of(obj)),
            update=lambda old, new: self._for_uids(uids_of_change(uids_of, old, new)),
            delete=lambda obj: self._for_uids(uids_of(obj)),
        )

    def on_daemon_service_account(self, obj: Obj) -> None:
        """Appeared or vanished: every CD's ChildrenReady depends on it (#586)."""
        self.enqueue_all()

    def on_node_change(self, old: Obj | None, new: Obj | None) -> None:
        if old is not None and new is not None and objects.labels(old) == objects.labels(new):
            return  # nothing a CD reports depends on other metadata
        uids = set(uids_of_change(uids_of_labelled, old, new))
        cliques = {clique for obj in (old, new) if (clique := clique_of(obj))}
        # A node joining or leaving a clique changes the sharing findings of every CD there.
        for clique in cliques:
            for node in self.caches.nodes.store.by_index(BY_GPU_CLIQUE, clique):
                if uid := cd_uid_of(node):
                    uids.add(uid)
        self._for_uids(uids)


def wire(router: EventRouter, coexistence: CoexistenceMonitor) -> None:
    """Registers every handler on the router's caches."""
    caches = router.caches
    caches.compute_domains.add_handler(
        FunctionHandler(
            add=router.on_cd, update=lambda _, new: router.on_cd(new), delete=router.on_cd
        )
    )
    labelled = router.on_owned(uids_of_labelled)
    for informer in (*caches.children, *caches.daemon_pods):
        informer.add_handler(labelled)
    cliques = router.on_owned(cd_uids_of_clique)
    for informer in caches.cliques:
        informer.add_handler(cliques)
    caches.nodes.add_handler(
        FunctionHandler(
            add=lambda obj: router.on_node_change(None, obj),
            update=router.on_node_change,
            delete=lambda obj: router.on_node_change(obj, None),
        )
    )
    # Heartbeats never get here (the informer drops them): what is left is readiness, or a
    # Node gaining or losing the label (the metadata handler above wakes the same CDs).
    caches.labelled_nodes.add_handler(labelled)
    # Updates of the ServiceAccount change nothing we report.
    caches.service_accounts.add_handler(
        FunctionHandler(
            add=router.on_daemon_service_account, delete=router.on_daemon_service_account
        )
    )

    # Both look at the whole (tiny) store, whatever the event.
    def crd_changed(*_: object) -> None:
        coexistence.crd_changed(caches.compute_domain_crd())
        coexistence.crds_present(caches.missing_crds())

    def nvidia_pods_changed(*_: object) -> None:
        coexistence.controller_pods_changed(caches.nvidia_controller_pod_list())

    def nvidia_daemonsets_changed(*_: object) -> None:
        coexistence.plugin_daemonsets_changed(caches.nvidia_daemonsets.store.list())

    def foreign_daemonsets_changed(*_: object) -> None:
        coexistence.foreign_daemonsets_changed(caches.foreign_daemonsets_of_live_cds())

    for informer, changed in (
        (caches.crds, crd_changed),
        (caches.clique_crds, crd_changed),
        *((pods, nvidia_pods_changed) for pods in caches.nvidia_controller_pods),
        (caches.nvidia_daemonsets, nvidia_daemonsets_changed),
        (caches.foreign_daemonsets, foreign_daemonsets_changed),
    ):
        informer.add_handler(FunctionHandler(add=changed, update=changed, delete=changed))

    # A foreign DaemonSet counts while its CD lives: look again when a CD comes, goes or starts
    # going (the foreign store is empty unless another controller made daemons: no cost then).
    def cd_came_or_went(*_: object) -> None:
        if len(caches.foreign_daemonsets.store):
            foreign_daemonsets_changed()

    caches.compute_domains.add_handler(
        FunctionHandler(add=cd_came_or_went, update=cd_came_or_went, delete=cd_came_or_went)
    )
