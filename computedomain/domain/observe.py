"""Observe: read one ComputeDomain and what the caches hold of it, once per reconcile
(``snapshot.DomainSnapshot``); the live path plans from that (``plan``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain import childkinds, projection
from computedomain.domain.caches import BY_CD
from computedomain.domain.childkinds import ChildKind, Inputs, Scope
from computedomain.domain.context import ReconcileContext
from computedomain.domain.kubeletplugin import daemon_image
from computedomain.domain.labels import cd_uid_of
from computedomain.domain.modes import StatusMode
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.runtime import objects


def status_mode(ctx: ReconcileContext, cd: ComputeDomain) -> StatusMode:
    # From the CRD; where it cannot be read, from what the apiserver dropped from a write.
    pruned = ctx.caches.missing_status_fields() or ctx.pruned_status_fields
    if ctx.settings.host_managed:
        return StatusMode(host_managed=True, pruned_fields=pruned)
    daemonsets = ctx.caches.children_of(ChildKind.DAEMON_SET, cd.metadata.uid)
    legacy = (
        projection.uses_legacy_protocol(daemonsets[0])
        if daemonsets
        else not ctx.settings.cliques_enabled
    )
    return StatusMode(legacy=legacy, pruned_fields=pruned)


def observe(ctx: ReconcileContext, obj: Mapping[str, Any]) -> DomainSnapshot:
    """Read the CD ``obj`` (from the cache) and what the caches hold of it, once."""
    caches, s = ctx.caches, ctx.settings
    cd = ComputeDomain.model_validate(obj)
    uid = cd.metadata.uid
    children = {child.kind: tuple(caches.children_of(child, uid)) for child in childkinds.CHILDREN}
    present: set[ChildKind] = set()
    for child in childkinds.in_mode(s.host_managed):
        # Any child of this kind labelled with the CD's UID serves (one beside the daemons only
        # in a managed namespace), including one made by an older controller with
        # generateName, and so does an object at the child's own name carrying the UID: never
        # create a second one.
        found = children[child.kind]
        if child.scope is Scope.DRIVER_NAMESPACE:
            found = tuple(o for o in found if objects.namespace(o) in s.managed_namespaces)
        named = caches.child_at(child.resource, *child.locate(obj, s.driver_namespace))
        if found or (named is not None and cd_uid_of(named) == uid):
            present.add(child.kind)
    inputs = None
    if cd.spec is not None and len(present) < len(childkinds.in_mode(s.host_managed)):
        # IMAGE_NAME, else the driver image NVIDIA's kubelet plugin runs beside the daemons.
        image = daemon_image(
            s.daemon.image, caches.nvidia_daemonsets.store.list(), s.driver_namespace
        )
        inputs = Inputs(replace(s.daemon, image=image), s.host_managed)
    return DomainSnapshot(
        cd=cd,
        obj=obj,
        mode=status_mode(ctx, cd),
        children=children,
        present=frozenset(present),
        pods=tuple(projection.daemon_pod_from_dict(p) for p in caches.pods_of(uid)),
        labelled_nodes=frozenset(
            objects.name(node) for node in caches.nodes.store.by_index(BY_CD, uid)
        ),
        inputs=inputs,
    )
