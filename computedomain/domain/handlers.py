"""Informer events -> workqueue keys.

Children live in another namespace than their CD, so every event is mapped through the
CD-UID label to the CD's key. A UID that no cached CD has becomes an orphan check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from computedomain.api import constants as c
from computedomain.domain.caches import BY_GPU_CLIQUE, BY_UID, Caches
from computedomain.domain.mapping import cd_uids_of_clique
from computedomain.domain.reconciler import orphan_key

Enqueue = Callable[[str], None]
EnqueueAfter = Callable[[str, float], None]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def cd_key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace')}/{meta.get('name')}"


class EventRouter:
    """Turns informer callbacks into reconcile keys (the handler layer)."""

    def __init__(
        self, caches: Caches, enqueue: Enqueue, enqueue_after: EnqueueAfter, orphan_grace: float
    ) -> None:
        self._caches = caches
        self._enqueue = enqueue
        self._enqueue_after = enqueue_after
        self._orphan_grace = orphan_grace

    def _for_uids(self, uids: Iterable[str]) -> None:
        for uid in uids:
            cds = self._caches.cds.by_index(BY_UID, uid)
            for cd in cds:
                self._enqueue(cd_key(cd))
            if not cds and self._caches.compute_domains.has_synced:
                # Seen on sight; the orphan reconcile applies the grace period and a live check.
                self._enqueue_after(orphan_key(uid), self._orphan_grace)

    # CDs -------------------------------------------------------------------
    def on_cd(self, obj: Mapping[str, Any]) -> None:
        self._enqueue(cd_key(obj))

    def on_cd_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._enqueue(cd_key(new))

    # Children, daemon pods --------------------------------------------------
    def on_labelled(self, obj: Mapping[str, Any]) -> None:
        uid = _labels(obj).get(c.CD_LABEL)
        if uid:
            self._for_uids([uid])

    def on_labelled_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        uids = {_labels(old).get(c.CD_LABEL), _labels(new).get(c.CD_LABEL)}
        self._for_uids(u for u in uids if u)

    # Cliques ---------------------------------------------------------------
    def on_clique(self, obj: Mapping[str, Any]) -> None:
        self._for_uids(cd_uids_of_clique(obj))

    def on_clique_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._for_uids(set(cd_uids_of_clique(old)) | set(cd_uids_of_clique(new)))

    # Daemon ServiceAccount ---------------------------------------------------
    def on_daemon_service_account(self, obj: Mapping[str, Any]) -> None:
        """Appeared or vanished: every CD's ChildrenReady depends on it (#586)."""
        for cd in self._caches.cds.list():
            self._enqueue(cd_key(cd))

    # Nodes -----------------------------------------------------------------
    def on_node(self, obj: Mapping[str, Any]) -> None:
        self._node_changed(None, obj)

    def on_node_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        if _labels(old) != _labels(new):
            self._node_changed(old, new)

    def on_node_delete(self, obj: Mapping[str, Any]) -> None:
        self._node_changed(obj, None)

    def _node_changed(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        uids: set[str] = set()
        cliques: set[str] = set()
        for obj in (old, new):
            if obj is None:
                continue
            labels = _labels(obj)
            if uid := labels.get(c.CD_LABEL):
                uids.add(uid)
            if clique := labels.get(c.GPU_CLIQUE_NODE_LABEL):
                cliques.add(clique)
        # A node joining or leaving a clique changes the sharing findings of every CD there.
        for clique in cliques:
            for node in self._caches.nodes.store.by_index(BY_GPU_CLIQUE, clique):
                if uid := _labels(node).get(c.CD_LABEL):
                    uids.add(uid)
        self._for_uids(uids)
